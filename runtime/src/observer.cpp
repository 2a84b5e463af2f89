#include "observer.h"

#include <mutex>

#include "ejk/flash_attention.h"

namespace ejk {
namespace {
std::mutex g_mu;
CompileObserver g_observer;
}  // namespace

void set_compile_observer(CompileObserver observer) {
  std::lock_guard lk(g_mu);
  g_observer = std::move(observer);
}

namespace detail {
void notify_compile(std::string_view key, bool started) {
  CompileObserver obs;
  {
    std::lock_guard lk(g_mu);
    obs = g_observer;
  }
  if (obs) obs(key, started);
}
}  // namespace detail
}  // namespace ejk
