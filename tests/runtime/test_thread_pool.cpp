// The thread pool under bad configuration and failing thread creation (issue 36, defects 4
// and 8): EJK_NUM_THREADS is bounded and parsed strictly; a pool whose threads cannot all be
// started runs with those it has, after one warning, instead of aborting or deadlocking.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <system_error>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "test_support.h"
#include "ejk/core/error.h"
#include "thread_pool.h"

using Catch::Matchers::ContainsSubstring;
using ejk::ThreadPool;

namespace {

// Sums 0..n-1 on the pool: every index is visited exactly once.
bool covers_range(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
  });
  for (auto& s : seen)
    if (s != 1) return false;
  return true;
}

// Starts `good` threads, then fails like pthread_create under `ulimit -u`.
ThreadPool::Spawn failing_after(int good) {
  auto started = std::make_shared<int>(0);
  return [started, good](std::function<void()> body) {
    if ((*started)++ >= good)
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread creation");
    return std::thread(std::move(body));
  };
}

int hardware() {
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? static_cast<int>(hc) : 1;
}

}  // namespace

TEST_CASE("pool: EJK_NUM_THREADS is bounded and parsed strictly", "[pool][env]") {
  {
    ejk::test::ScopedEnv unset("EJK_NUM_THREADS", std::nullopt);
    CHECK(ThreadPool::configured_threads() == hardware());
  }
  {
    ejk::test::ScopedEnv two("EJK_NUM_THREADS", "2");
    CHECK(ThreadPool::configured_threads() == 2);
  }
  for (const char* bad : {"1000000", "99999999999", "abc", "-3", "0", "4abc", "+2", " 2", "0x10", "1e3"}) {
    CAPTURE(bad);
    ejk::test::ScopedEnv env("EJK_NUM_THREADS", bad);
    CHECK_THROWS_WITH(ThreadPool::configured_threads(),
                      ContainsSubstring("EJK_NUM_THREADS") && ContainsSubstring(bad) &&
                          ContainsSubstring("expected a decimal integer from 1 to"));
  }
  // At most 4 threads per hardware thread (and 1024).
  ejk::test::ScopedEnv many("EJK_NUM_THREADS", std::to_string(4 * hardware() + 1));
  CHECK_THROWS_AS(ThreadPool::configured_threads(), ejk::InvalidArgument);
}

TEST_CASE("pool: failed thread creation leaves a smaller pool and one warning", "[pool]") {
  for (int good : {0, 1, 5}) {
    CAPTURE(good);
    ejk::test::StderrCapture err;
    ThreadPool pool(16, failing_after(good));
    CHECK(pool.size() == good + 1);
    CHECK(covers_range(pool, 1000));
    CHECK(covers_range(pool, 7));
    std::string text = err.text();
    CHECK_THAT(text, ContainsSubstring("started " + std::to_string(good) + " of 15 worker threads"));
    CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  }
}

TEST_CASE("pool: a real thread limit (RLIMIT_NPROC) does not abort or hang", "[pool]") {
  if (!ejk::test::is_root()) SKIP("needs root to run as a user whose process limit can be set");
  int status = ejk::test::run_in_child(
      [] {
        // RLIMIT_NPROC does not bind root; as another user at limit 1 no thread can start.
        if (::setgid(ejk::test::kNobody) != 0 || ::setuid(ejk::test::kNobody) != 0) return 10;
        struct rlimit one = {1, 1};
        if (::setrlimit(RLIMIT_NPROC, &one) != 0) return 11;
        ThreadPool pool(64);
        if (pool.size() != 1) return 12;
        return covers_range(pool, 500) ? 0 : 13;
      },
      std::chrono::seconds(30));
  CHECK(status == 0);  // -1: the constructor deadlocked; -2: it aborted
}

TEST_CASE("pool: ranges, grains and exceptions", "[pool]") {
  ThreadPool pool(4);
  CHECK(pool.size() == 4);
  CHECK(covers_range(pool, 1));
  CHECK(covers_range(pool, 10007));
  CHECK_THROWS_WITH(pool.parallel_for(100, 1, [](int64_t b, int64_t) {
    if (b == 50) throw std::runtime_error("range 50");
  }), "range 50");
  CHECK(covers_range(pool, 100));  // usable after a failed job
}
