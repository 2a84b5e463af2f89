// Runs a shell command for the CLI's end-to-end tests: its exit status, its output (stdout and
// stderr together) and how long it took.
#pragma once
#include <catch2/catch_test_macros.hpp>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace ejk::test {

struct Proc {
  int status = -1;  // exit status, or -1 when killed by a signal (by `timeout`: 124)
  std::string out;
  double seconds = 0;
};

inline Proc shell(const std::string& cmd) {
  Proc p;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) p.out.append(buf.data(), n);
  const int st = pclose(f);
  p.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace ejk::test
