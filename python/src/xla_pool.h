// ejk_context.cpu_parallel_for on the thread pool XLA:CPU hands an FFI handler, so a call's
// tasks share XLA's threads instead of oversubscribing the cores with ejkernel's own pool.
//
// XLA promises nothing about when (or whether) a scheduled task runs: the pool may be busy, have
// one thread, or be the caller's. So the calling thread takes ranges itself, and waits only for
// ranges other threads have claimed; a task that starts after the last range was claimed finds
// none and touches only the shared job, which it keeps alive.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "xla/ffi/api/ffi.h"

namespace ejk::jax {

class XlaPool {
 public:
  explicit XlaPool(xla::ffi::ThreadPool& pool) : pool_(pool), threads_(pool.num_threads()) {}

  // The ejk_context.cpu_parallel_for signature; `self` is an XlaPool.
  static void parallel_for(void* self, int64_t n, void (*fn)(void* arg, int64_t begin, int64_t end), void* arg) {
    static_cast<XlaPool*>(self)->run(n, fn, arg);
  }

 private:
  using Fn = void (*)(void* arg, int64_t begin, int64_t end);

  struct Job {
    Fn fn;
    void* arg;
    int64_t n, grain;
    std::atomic<int64_t> next{0};
    int64_t done = 0;  // guarded by mu
    std::mutex mu;
    std::condition_variable all_done;

    // Claims and runs ranges until none is left.
    void work() {
      for (;;) {
        const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
        if (begin >= n) return;
        const int64_t end = std::min(n, begin + grain);
        fn(arg, begin, end);
        std::lock_guard lk(mu);
        done += end - begin;
        if (done == n) all_done.notify_all();
      }
    }

    void wait() {
      std::unique_lock lk(mu);
      all_done.wait(lk, [&] { return done == n; });
    }
  };

  void run(int64_t n, Fn fn, void* arg) {
    const int64_t helpers = std::min<int64_t>(threads_, n) - 1;
    if (helpers <= 0) return fn(arg, 0, n);
    // A few ranges per thread: tasks differ in cost (causal rows, varlen sequences).
    const int64_t grain = std::max<int64_t>(1, n / ((helpers + 1) * 4));
    auto job = std::make_shared<Job>();
    job->fn = fn;
    job->arg = arg;
    job->n = n;
    job->grain = grain;
    for (int64_t i = 0; i < helpers; ++i) pool_.Schedule([job] { job->work(); });
    job->work();
    job->wait();
  }

  xla::ffi::ThreadPool& pool_;
  int64_t threads_;
};

}  // namespace ejk::jax
