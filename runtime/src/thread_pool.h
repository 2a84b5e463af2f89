// A persistent pool for CPU kernels. parallel_for hands out task indices dynamically (one
// atomic counter, chunks of `grain`), which balances causal attention, where tasks near the
// diagonal cost less than tasks far from it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ejk {

class ThreadPool {
 public:
  // Starts a worker thread running `body`; throws std::system_error when it cannot (the
  // default wraps std::thread). Tests replace it to simulate `ulimit -u`.
  using Spawn = std::function<std::thread(std::function<void()> body)>;

  // Sized by configured_threads(); throws ejk::InvalidArgument for a bad EJK_NUM_THREADS.
  static ThreadPool& global();
  // EJK_NUM_THREADS (1 .. min(1024, 4 x hardware threads)), else the hardware concurrency.
  static int configured_threads();

  // Asks for num_threads - 1 workers (the caller is the last one). When thread creation fails
  // the pool keeps the workers it has and says so once on stderr: it never aborts or hangs.
  explicit ThreadPool(int num_threads, const Spawn& spawn = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller works too

  // Calls fn(begin, end) over disjoint ranges covering [0, n). Blocks until all are done;
  // rethrows the first exception a range threw. Not reentrant: one job at a time per pool.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_ranges();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::mutex job_mu_;  // serializes parallel_for callers
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace ejk
