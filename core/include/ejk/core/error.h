// Exception types. Every message names what was wrong and what was expected. EJK_API: their
// typeinfo is exported from libejk, so callers can catch them.
#pragma once
#include <stdexcept>
#include <string>

#include "ejk/export.h"

namespace ejk {

class EJK_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a bad argument: the message names the argument and the expected value.
class EJK_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A spec file is malformed: the message names the file, the line and the key.
class EJK_API SpecError : public Error {
 public:
  using Error::Error;
};

// A variant could not be produced: compile failure, or JIT disabled on a cache miss.
class EJK_API CompileError : public Error {
 public:
  using Error::Error;
};

// A backend cannot run here (no driver, no device); the message says why.
class EJK_API BackendUnavailable : public Error {
 public:
  using Error::Error;
};

}  // namespace ejk
