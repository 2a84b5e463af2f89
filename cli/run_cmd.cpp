// ejk run flash_attention: make (or load) inputs, run, time, check against float64, report.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "commands.h"
#include "ejk/core/error.h"
#include "flash_case.h"
#include "progress.h"

namespace ejk::cli {
namespace {

struct RunArgs {
  std::string op = "flash_attention";
  FlashCaseSpec spec;
  std::string window, dtype = "f32", backend = "cpu";
  float softcap = 0, scale = 0;
  int64_t block_q = 0, block_k = 0;
  int iters = 5;
  bool check = false, json = false, no_normalize = false;
  std::string save, load;
};

struct Errors {
  double rel_l2 = 0, max_abs = 0, lse_max_abs = 0;
  bool nan = false;
};

// Compares out (typed) and lse with the float64 reference: rel-L2 and max abs error; NaN, and
// any lse mismatch in infinities, count as failure.
Errors compare(const Tensor& out, const Tensor& lse, const FlashAttentionReference& ref) {
  Tensor o = to_f32(out);
  Errors e;
  double num = 0, den = 0;
  for (int64_t i = 0; i < o.numel(); ++i) {
    double x = o.data_as<float>()[i], r = ref.out[i];
    if (std::isnan(x)) e.nan = true;
    num += (x - r) * (x - r);
    den += r * r;
    e.max_abs = std::max(e.max_abs, std::abs(x - r));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  for (int64_t i = 0; i < lse.numel(); ++i) {
    double x = lse.data_as<float>()[i], r = ref.lse[i];
    if (std::isnan(x) || std::isinf(x) != std::isinf(r)) e.nan = true;
    else if (!std::isinf(r)) e.lse_max_abs = std::max(e.lse_max_abs, std::abs(x - r));
  }
  return e;
}

std::optional<SlidingWindow> parse_window(const std::string& w) {
  if (w.empty()) return std::nullopt;
  auto comma = w.find(',');
  try {
    if (comma == std::string::npos) return SlidingWindow::symmetric(std::stoll(w));
    return SlidingWindow{std::stoll(w.substr(0, comma)), std::stoll(w.substr(comma + 1))};
  } catch (const std::exception&) {
    throw InvalidArgument(fmt::format("--window: expected W or L,R (integers), got '{}'", w));
  }
}

// Where the inputs go: --backend cuda needs a usable GPU; auto takes one when there is one
// and says why not otherwise.
Device pick_device(Backend backend, DType dtype, std::string& fallback) {
  std::string why;
  switch (backend) {
    case Backend::cpu: return Device{};
    case Backend::cuda:
      if (!backend_available(Backend::cuda, &why)) throw BackendUnavailable("--backend cuda: " + why);
      return Device{DeviceKind::cuda, 0};
    case Backend::hip:
      backend_available(Backend::hip, &why);
      throw BackendUnavailable("--backend hip: " + why);
    case Backend::auto_:
      if (dtype == DType::f32) {
        fallback = "auto picked the CPU: the CUDA variants take bf16 or f16, not f32";
        return Device{};
      }
      if (backend_available(Backend::cuda, &why)) return Device{DeviceKind::cuda, 0};
      fallback = "auto picked the CPU: CUDA unavailable (" + why + ")";
      return Device{};
  }
  return Device{};
}

void run_flash(RunArgs a) {
  if (a.op != "flash_attention")
    throw InvalidArgument(fmt::format("run: unknown op '{}', expected flash_attention", a.op));
  FlashCase c;
  if (!a.load.empty()) {
    c = load_case(a.load);
  } else {
    a.spec.dtype = parse_dtype(a.dtype);
    a.spec.window = parse_window(a.window);
    if (a.softcap != 0) a.spec.softcap = a.softcap;
    if (a.scale != 0) a.spec.scale = a.scale;
    a.spec.normalize_output = !a.no_normalize;
    c = make_random_case(a.spec);
  }
  std::string fallback;
  Device device = pick_device(parse_backend(a.backend), c.spec.dtype, fallback);
  FlashAttentionOptions opt = c.options(parse_backend(a.backend), a.block_q, a.block_k);
  std::vector<Tensor> device_copies;
  const FlashAttentionInputs in = c.inputs_on(device, device_copies);

  FlashAttentionResult r;
  {
    CompileProgress progress;
    r = flash_attention(in, opt);  // first call: includes finding/compiling the variant
    synchronize(device);
  }
  std::vector<double> times;
  for (int i = 0; i < a.iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    flash_attention_into(in, opt, r.out.view(), r.lse.view());
    synchronize(device);
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!fallback.empty()) r.info.fallback_reason = fallback;
  std::sort(times.begin(), times.end());
  double ms = times.empty() ? 0 : times[times.size() / 2];
  double gflops = ms > 0 ? 4.0 * static_cast<double>(c.spec.hq * c.spec.d) * c.visible_pairs() / (ms * 1e6) : 0;

  std::optional<Errors> err;
  if (a.check) {
    // Poison, run once more, then compare: every element must have been written.
    Tensor poison_out = Tensor::empty(r.out.shape(), r.out.dtype());
    Tensor poison_lse = Tensor::empty(r.lse.shape(), DType::f32);
    std::fill_n(static_cast<unsigned char*>(poison_out.data()), poison_out.nbytes(), 0xff);
    std::fill_n(static_cast<unsigned char*>(poison_lse.data()), poison_lse.nbytes(), 0xff);
    r.out = poison_out.to(device);
    r.lse = poison_lse.to(device);
    flash_attention_into(in, opt, r.out.view(), r.lse.view());
    synchronize(device);
    r.out = r.out.to(Device{});
    r.lse = r.lse.to(Device{});
    err = compare(r.out, r.lse, flash_attention_reference(c.inputs(), opt));
  }
  double tol = c.spec.dtype == DType::f32 ? 1e-5 : 1e-2;
  bool pass = !err || (!err->nan && err->rel_l2 <= tol);
  if (!a.save.empty()) save_case(c, r.out.to(Device{}), r.lse.to(Device{}), a.save);

  if (a.json) {
    nlohmann::json j;
    j["op"] = a.op;
    j["key"] = r.info.key;
    j["backend"] = std::string(backend_name(r.info.backend));
    j["source"] = std::string(source_name(r.info.source));
    j["compile_ms"] = r.info.compile_ms;
    j["load_ms"] = r.info.load_ms;
    j["ms"] = ms;
    j["gflops"] = gflops;
    j["rel_l2_err"] = err ? nlohmann::json(err->rel_l2) : nlohmann::json();
    j["max_abs_err"] = err ? nlohmann::json(err->max_abs) : nlohmann::json();
    j["lse_max_abs_err"] = err ? nlohmann::json(err->lse_max_abs) : nlohmann::json();
    j["check"] = err ? nlohmann::json(pass ? "pass" : "fail") : nlohmann::json();
    if (!r.info.fallback_reason.empty()) j["fallback_reason"] = r.info.fallback_reason;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("{}  [{} from {}]\n", r.info.key, backend_name(r.info.backend), source_name(r.info.source));
    if (r.info.source == VariantSource::jit) std::cout << fmt::format("  compile {:.1f} ms\n", r.info.compile_ms);
    if (r.info.source == VariantSource::cache) std::cout << fmt::format("  cache load {:.2f} ms\n", r.info.load_ms);
    std::cout << fmt::format("  time {:.3f} ms (median of {})  {:.1f} GFLOP/s\n", ms, a.iters, gflops);
    if (err)
      std::cout << fmt::format("  check vs float64: rel_l2 {:.3e}  max_abs {:.3e}  lse max_abs {:.3e}  (tol {:.0e}) {}\n",
                               err->rel_l2, err->max_abs, err->lse_max_abs, tol, pass ? "PASS" : "FAIL");
    if (!r.info.fallback_reason.empty()) std::cerr << "note: " << r.info.fallback_reason << "\n";
  }
  if (!pass) set_exit_code(1);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand("run", "Run an op on random (or --load'ed) inputs");
  run->add_option("op", a->op, "Op to run")->check(CLI::IsMember({"flash_attention"}))->required();
  auto& s = a->spec;
  run->add_option("--b", s.b, "Batch (varlen: number of sequences)")->capture_default_str();
  run->add_option("--sq", s.sq, "Query length (varlen: packed total)")->capture_default_str();
  run->add_option("--sk", s.sk, "Key length (varlen: packed total)")->capture_default_str();
  run->add_option("--hq", s.hq, "Query heads")->capture_default_str();
  run->add_option("--hkv", s.hkv, "Key/value heads (divides hq)")->capture_default_str();
  run->add_option("--d", s.d, "Head dim")->capture_default_str();
  run->add_flag("--causal", s.causal, "Causal mask (top-left aligned)");
  run->add_option("--window", a->window, "Sliding window: W or L,R");
  run->add_option("--softcap", a->softcap, "Logit soft cap C: C*tanh(s/C)");
  run->add_option("--scale", a->scale, "Softmax scale (default 1/sqrt(D))");
  run->add_flag("--sinks", s.sinks, "Random attention sinks, one per head");
  run->add_flag("--segments", s.segments, "Random segment ids (with padding)");
  run->add_flag("--varlen", s.varlen, "Packed variable-length sequences");
  run->add_flag("--bias", s.bias, "Random additive bias [B, Hq, Sq, Sk]");
  run->add_flag("--no-normalize", a->no_normalize, "normalize_output = false");
  run->add_option("--dtype", a->dtype, "f32, bf16 or f16")->capture_default_str();
  run->add_option("--backend", a->backend, "cpu, cuda, hip or auto (a GPU when there is one)")->capture_default_str();
  run->add_option("--block-q", a->block_q, "Query block (default: the spec's heuristic)");
  run->add_option("--block-k", a->block_k, "Key block (default: the spec's heuristic)");
  run->add_option("--iters", a->iters, "Timed runs (median reported)")->capture_default_str();
  run->add_option("--seed", s.seed, "Random seed")->capture_default_str();
  run->add_flag("--check", a->check, "Compare with the float64 reference; exit 1 past tolerance");
  run->add_flag("--json", a->json, "Print one JSON object");
  run->add_option("--save", a->save, "Write inputs, outputs and params.json to this folder");
  run->add_option("--load", a->load, "Read inputs from a folder written by --save");
  run->callback([a] { run_flash(*a); });
}

}  // namespace ejk::cli
