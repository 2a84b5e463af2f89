#include "progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "ejk/types.h"

namespace ejk::cli {

CompileProgress::CompileProgress() : tty_(isatty(STDERR_FILENO) != 0) {
  if (!tty_) return;
  set_compile_observer([this](std::string_view key, bool started) {
    if (started) start(std::string(key)); else stop();
  });
}

CompileProgress::~CompileProgress() {
  if (tty_) set_compile_observer({});
  stop();
}

void CompileProgress::start(std::string key) {
  stop();
  running_ = true;
  spinner_ = std::thread([this, key = std::move(key)] {
    static const char kFrames[] = "|/-\\";
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; running_; ++i) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r%c compiling %s (%.1f s)", kFrames[i % 4], key.c_str(), s);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  });
}

void CompileProgress::stop() {
  running_ = false;
  if (spinner_.joinable()) spinner_.join();
}

}  // namespace ejk::cli
