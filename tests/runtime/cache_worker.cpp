// Helper process for the multi-process cache tests.
//
//   cache_worker <root> <key> <hash> <counter_file> <start_at_unix_ms> <sleep_ms> <size>
// asks get_or_build for one entry, records every build it performs in a shared counter file,
// and prints where the bytes came from. Exit status: 0 when the bytes are the expected
// payload, 1 when they differ, 2 on an error.
//
//   cache_worker hold <root> <key> <hash>
// takes the entry's lock, prints "locked" and sleeps (the test stops it with SIGSTOP, as a
// compiler stopped by a debugger or the shell would be, and kills it afterwards).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "cache/get_or_build.h"
#include "cache_test_payload.h"

namespace {

using Clock = std::chrono::system_clock;

// Appends one line; O_APPEND keeps lines from concurrent writers whole.
void record_build(const std::string& counter_file) {
  int fd = ::open(counter_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open counter file " + counter_file);
  std::string line = std::to_string(::getpid()) + "\n";
  ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size()))
    throw std::runtime_error("cannot write counter file " + counter_file);
}

// All workers start at the same instant so they really race for the missing entry.
void wait_until(long long start_at_unix_ms) {
  std::this_thread::sleep_until(Clock::time_point(std::chrono::milliseconds(start_at_unix_ms)));
}

int hold_lock(char** argv) {
  ejk::cache::DiskCache cache(argv[2]);
  auto lock = cache.lock_for("test", argv[3], argv[4], std::chrono::seconds(10));
  if (!lock) return 2;
  std::printf("locked\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::minutes(10));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "hold") {
    try {
      return hold_lock(argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cache_worker: %s\n", e.what());
      return 2;
    }
  }
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: cache_worker <root> <key> <hash> <counter_file> <start_at_unix_ms> "
                 "<sleep_ms> <size>\n");
    return 2;
  }
  try {
    std::string key = argv[2], hash = argv[3], counter_file = argv[4];
    int sleep_ms = std::atoi(argv[6]);
    size_t size = std::strtoull(argv[7], nullptr, 10);
    ejk::cache::DiskCache cache(argv[1]);
    wait_until(std::atoll(argv[5]));
    auto result = ejk::cache::get_or_build(cache, "test", key, hash, [&] {
      record_build(counter_file);
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));  // widen the race
      return ejk::test::payload_for_hash(hash, size);
    });
    std::printf("%s\n", std::string(ejk::cache::to_string(result.source)).c_str());
    return result.bytes == ejk::test::payload_for_hash(hash, size) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cache_worker: %s\n", e.what());
    return 2;
  }
}
