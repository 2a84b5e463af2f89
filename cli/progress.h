// A spinner on stderr while a variant compiles, only when stderr is a terminal.
#pragma once
#include <atomic>
#include <string>
#include <thread>

namespace ejk::cli {

class CompileProgress {
 public:
  CompileProgress();   // installs the library's compile observer
  ~CompileProgress();  // removes it, stops the spinner

 private:
  void start(std::string key);
  void stop();
  std::atomic<bool> running_{false};
  std::thread spinner_;
  bool tty_ = false;
};

}  // namespace ejk::cli
