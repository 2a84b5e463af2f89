// Exception types. Every message names what was wrong and what was expected.
#pragma once
#include <stdexcept>
#include <string>

namespace ejk {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a bad argument: the message names the argument and the expected value.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A spec file is malformed: the message names the file, the line and the key.
class SpecError : public Error {
 public:
  using Error::Error;
};

// A variant could not be produced: compile failure, or JIT disabled on a cache miss.
class CompileError : public Error {
 public:
  using Error::Error;
};

// A backend cannot run here (no driver, no device); the message says why.
class BackendUnavailable : public Error {
 public:
  using Error::Error;
};

}  // namespace ejk
