// CPU flash attention forward: one task = (sequence b, q head h, block of kBlockQ queries),
// numbered as flash_fwd_num_tasks counts them. Semantics are mask.h's; the runtime runs
// disjoint task ranges on its thread pool, so everything here is reentrant and lives on the
// calling thread's stack.
//
// Layers: task.h (geometry, kv-block walk, softmax state, output) drives an engine that owns
// the buffers and the two products: fma_engine.h (float32 vector FMAs, every dtype and ISA)
// or amx_engine.h (bf16 on AMX tiles, when compiled for AMX and granted by the OS).
//
// Header only and freestanding (no standard headers): it is also JIT-compiled in-process.
#pragma once
#include "ejk/kernels/common/attention_variant.h"
#include "ejk/kernels/common/base.h"
#include "ejk/kernels/common/flash_params.h"
#include "ejk/kernels/cpu/amx.h"
#include "ejk/kernels/cpu/amx_engine.h"
#include "ejk/kernels/cpu/fma_engine.h"
#include "ejk/kernels/cpu/task.h"
#include "ejk/kernels/cpu/types.h"

namespace ejk::cpu {

// Compile-time features of a variant (common/attention_variant.h, shared with the CUDA kernels
// and the reference); per_item stays off on CPU (one schedule).
using FlashFlags = AttentionFlags;

template <ElemKind kElem, int kHeadDim, int kBlockQ, int kBlockK, FlashFlags kFlags>
struct FlashFwdConfig {
  static constexpr ElemKind elem = kElem;
  static constexpr int head_dim = kHeadDim;
  static constexpr int block_q = kBlockQ;
  static constexpr int block_k = kBlockK;
  static constexpr FlashFlags flags = kFlags;
  static_assert(kHeadDim > 0 && kBlockQ > 0 && kBlockK > 0, "sizes must be positive");
};

// Stack budget of one task range's buffers (worker threads have 8 MiB stacks).
inline constexpr long kMaxWorkspaceBytes = 512 * 1024;

// Tasks [task_begin, task_end) of p with one engine, each decoded and handed to
// task(g, state, engine). Not inlined, so only the engine that runs occupies the stack.
template <class Cfg, class Engine, class Task>
__attribute__((noinline)) void run_tasks_with(const FlashFwdParams& p, long long task_begin, long long task_end,
                                              const Task& task) {
  static_assert(sizeof(Engine) + sizeof(TaskState<Cfg>) <= kMaxWorkspaceBytes,
                "block_q x block_k x head_dim too large for the 512 KiB stack workspace");
  Engine engine;
  TaskState<Cfg> state;
  TaskGeometry g;
  for (long long t = task_begin; t < task_end; ++t)
    if (decode_task(p, t, Cfg::block_q, g)) task(g, state, engine);
}

// Whether flash_fwd_tasks<Cfg> runs on AMX tiles: compiled for AMX and bf16 with tile-sized
// blocks; otherwise it runs the FMA engine. An object holds one engine only: a fallback engine
// would double the compile (the JIT's cold time) for code that never runs, since the runtime
// picks an AMX target only where the OS grants the tile state (runtime/src/engine/host_cpu.cpp, host_has).
// Dropout variants run the FMA engine: the AMX engine packs probabilities into bf16 tiles as it
// computes them, before the keep mask could apply.
template <class Cfg> constexpr bool flash_fwd_uses_amx() {
#if EJK_CPU_AMX
  return AmxEngine<Cfg>::kSupported && !Cfg::flags.dropout;
#else
  return false;
#endif
}

// Tasks [task_begin, task_end) of p handed to task(g, state, engine): on AMX tiles where
// flash_fwd_uses_amx<Cfg>, else on the FMA engine.
template <class Cfg, class Task>
void run_forward_tasks(const FlashFwdParams& p, long long task_begin, long long task_end, const Task& task) {
#if EJK_CPU_AMX
  if constexpr (flash_fwd_uses_amx<Cfg>()) {
    // Without the grant the first tile instruction raises SIGILL; stop with a clear trap
    // instead (only reachable when the object is called outside the runtime's dispatch).
    if (!amx::request_permission()) __builtin_trap();
    // The tiles hold state across the range: configured before, released after.
    AmxEngine<Cfg>::begin_range();
    run_tasks_with<Cfg, AmxEngine<Cfg>>(p, task_begin, task_end, task);
    AmxEngine<Cfg>::end_range();
    return;
  }
#endif
  run_tasks_with<Cfg, FmaEngine<Cfg>>(p, task_begin, task_end, task);
}

// Runs tasks [task_begin, task_end) of flash_fwd_num_tasks(p, Cfg::block_q).
template <class Cfg>
void flash_fwd_tasks(const FlashFwdParams& p, long long task_begin, long long task_end) {
  run_forward_tasks<Cfg>(p, task_begin, task_end, [&](const TaskGeometry& g, TaskState<Cfg>& state, auto& engine) {
    run_task<Cfg>(p, g, state, engine);
  });
}

}  // namespace ejk::cpu
