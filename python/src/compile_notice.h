// A JIT compile that takes longer than a threshold says so on stderr, once per key: the first
// call of a new variant is otherwise a silent pause of seconds. Installed by the framework
// libraries (libejk_jax, libejk_torch) through ejk_set_compile_observer; libejk keeps one
// observer per process, so whichever library installs it last reports, in the same words.
#pragma once
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "ejk/ejk.h"

namespace ejk::python {

class CompileNotice {
 public:
  // Reports compiles of at least `seconds` from now on.
  static void install(double seconds) {
    {
      std::lock_guard lk(get().mu_);
      get().threshold_s_ = seconds;
    }
    ejk_set_compile_observer(&CompileNotice::observe, nullptr);
  }

 private:
  static CompileNotice& get() {
    static CompileNotice* n = new CompileNotice();  // observed from compiling threads until exit
    return *n;
  }

  static void observe(void*, const char* key, int started) {
    CompileNotice& n = get();
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lk(n.mu_);
    if (started) {
      n.started_[key] = now;
      return;
    }
    auto it = n.started_.find(key);
    if (it == n.started_.end()) return;
    const double seconds = std::chrono::duration<double>(now - it->second).count();
    n.started_.erase(it);
    if (seconds < n.threshold_s_ || !n.told_.insert(key).second) return;
    std::fprintf(stderr, "ejk: JIT-compiled %s in %.1f s (the disk cache keeps it for later runs)\n", key, seconds);
  }

  std::mutex mu_;
  double threshold_s_ = 1.0;
  std::map<std::string, std::chrono::steady_clock::time_point> started_;
  std::set<std::string> told_;
};

}  // namespace ejk::python
