// Exception types. Every message names what was wrong and what was expected. Their typeinfo is
// exported from libejk (built with hidden visibility), so callers can catch them; core sits below
// the runtime, so it marks them itself rather than through the runtime's ejk/export.h.
#pragma once
#include <stdexcept>
#include <string>

#if defined(_WIN32)
#define EJK_CORE_EXPORT
#else
#define EJK_CORE_EXPORT __attribute__((visibility("default")))
#endif

namespace ejk {

class EJK_CORE_EXPORT Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a bad argument: the message names the argument and the expected value.
class EJK_CORE_EXPORT InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A spec file is malformed: the message names the file, the line and the key.
class EJK_CORE_EXPORT SpecError : public Error {
 public:
  using Error::Error;
};

// A variant could not be produced: compile failure, or JIT disabled on a cache miss.
class EJK_CORE_EXPORT CompileError : public Error {
 public:
  using Error::Error;
};

// A backend cannot run here (no driver, no device); the message says why.
class EJK_CORE_EXPORT BackendUnavailable : public Error {
 public:
  using Error::Error;
};

}  // namespace ejk
