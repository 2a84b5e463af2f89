// Timing on a shared machine: a sample runs the timed function for about a second, and counts
// only if the other processes used less than a tenth of a CPU meanwhile (from /proc/stat,
// minus this process's own CPU time). The best accepted sample is the undisturbed time.
#pragma once
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace ejk::bench {

struct QuietTime {
  double ms = INFINITY;  // best per-call time of the accepted samples (or of all, if none)
  int accepted = 0, samples = 0;
};

// CPU seconds all processes have spent busy, from the first line of /proc/stat.
inline double machine_busy_seconds() {
  std::ifstream stat("/proc/stat");
  std::string line, cpu;
  std::getline(stat, line);
  std::istringstream in(line);
  in >> cpu;
  long long v, total = 0, idle = 0;
  for (int i = 0; in >> v; ++i) {
    total += v;
    if (i == 3 || i == 4) idle += v;  // idle, iowait
  }
  return double(total - idle) / double(sysconf(_SC_CLK_TCK));
}

inline double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// fn is one call of the timed work; it has run once already (warm-up) taking first_ms.
inline QuietTime time_quietly(const std::function<void()>& fn, double first_ms, int wanted = 3,
                              int max_samples = 12, double max_foreign_cpus = 0.1) {
  const int calls = std::max(1, int(std::ceil(1000.0 / std::max(first_ms, 1e-3))));
  QuietTime best, fallback;
  for (int s = 0; s < max_samples && best.accepted < wanted; ++s) {
    const double busy0 = machine_busy_seconds(), own0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) fn();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double foreign =
        (machine_busy_seconds() - busy0 - (process_cpu_seconds() - own0)) / std::max(wall, 1e-9);
    const double per_call_ms = wall * 1e3 / calls;
    ++best.samples;
    fallback.ms = std::min(fallback.ms, per_call_ms);
    if (foreign < max_foreign_cpus) {
      best.ms = std::min(best.ms, per_call_ms);
      ++best.accepted;
    }
  }
  if (best.accepted == 0) best.ms = fallback.ms;
  return best;
}

}  // namespace ejk::bench
