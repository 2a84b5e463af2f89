#include "thread_pool.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <system_error>

#include "util/env.h"

namespace ejk {
namespace {

constexpr int64_t kMaxThreads = 1024;
constexpr int64_t kMaxThreadsPerCore = 4;

int hardware_threads() {
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(std::min<unsigned>(hc, kMaxThreads)) : 1;
}

std::thread spawn_std_thread(std::function<void()> body) { return std::thread(std::move(body)); }

}  // namespace

int ThreadPool::configured_threads() {
  const int hardware = hardware_threads();
  const int64_t most = std::min<int64_t>(kMaxThreads, kMaxThreadsPerCore * hardware);
  return static_cast<int>(util::env_int("EJK_NUM_THREADS", 1, most, hardware));
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(configured_threads());
  return pool;
}

ThreadPool::ThreadPool(int num_threads, const Spawn& spawn) {
  const Spawn& start = spawn ? spawn : Spawn(spawn_std_thread);
  // Reserved first: a push_back that threw after its thread started would destroy a joinable
  // std::thread, which terminates the process.
  workers_.reserve(static_cast<size_t>(std::max(num_threads - 1, 0)));
  for (int i = 1; i < num_threads; ++i) {
    try {
      workers_.push_back(start([this] { worker_loop(); }));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ejk: warning: started %zu of %d worker threads (%s); running with %zu\n",
                   workers_.size(), num_threads - 1, e.what(), workers_.size() + 1);
      break;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_ranges() {
  for (;;) {
    int64_t begin = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= n_) return;
    int64_t end = std::min(n_, begin + grain_);
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard lk(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_);  // stop handing out work
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    run_ranges();
    {
      std::lock_guard lk(mu_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  std::lock_guard job(job_mu_);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lk(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = std::max<int64_t>(1, grain);
    next_.store(0);
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_ranges();
  std::exception_ptr err;
  {
    std::unique_lock lk(mu_);
    done_.wait(lk, [&] { return active_ == 0; });
    fn_ = nullptr;
    err = error_;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace ejk
