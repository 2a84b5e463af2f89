// Progress notifications for long compiles (the CLI draws a spinner with them).
#pragma once
#include <string_view>

namespace ejk::detail {

// Calls the observer set with ejk::set_compile_observer, if any.
void notify_compile(std::string_view key, bool started);

// Notifies start on construction and end on destruction, also when the compile throws.
class CompileNotice {
 public:
  explicit CompileNotice(std::string_view key) : key_(key) { notify_compile(key_, true); }
  ~CompileNotice() { notify_compile(key_, false); }
  CompileNotice(const CompileNotice&) = delete;
  CompileNotice& operator=(const CompileNotice&) = delete;

 private:
  std::string_view key_;
};

}  // namespace ejk::detail
