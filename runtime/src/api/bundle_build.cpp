// ejk::build_bundle (ejk/bundle.h): which variants a bundle holds, compiling them in parallel
// through the run-time path (disk cache, else clang or NVRTC), and writing the file.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bundle/writer.h"
#include "ejk/admin.h"
#include "ejk/bundle.h"
#include "ejk/core/error.h"
#include "ejk/core/pattern.h"
#include "engine/host_cpu.h"
#include "engine/keys.h"
#include "engine/op_def.h"
#include "engine/variant_store.h"
#include "registry.h"
#if EJK_HAVE_CUDA
#include "cuda/nvrtc_compiler.h"
#endif

namespace ejk {
namespace {
namespace fs = std::filesystem;

// What one compile may take: the largest kernel (flash sm90a, head_dim 256, through NVRTC)
// peaks at ~185 MB for the whole `ejk compile` process; the margin covers larger kernels.
constexpr uint64_t kMemoryPerCompile = uint64_t(512) << 20;

// Where the bundle's variants will run: a CPU target level (or this host) or a CUDA device arch.
struct Platform {
  std::string name;
  bool host = false;                  // CPU: this host's target per op (EJK_CPU_TARGET applies)
  std::vector<std::string> features;  // CPU: the level's required features
  int major = 0, minor = 0;           // CUDA: the device's compute capability
};

struct Job {
  const OpSchema* schema;
  VariantKey key;
  std::string arch;  // CUDA: the cubin's; CPU: empty (the key's target decides)
};

std::vector<std::string> cpu_target_names() {
  std::vector<std::string> names;
  for (const OpSchema* s : detail::all_op_schemas())
    if (s->has_backend("cpu"))
      for (const TargetDef& t : s->backend("cpu").targets)
        if (std::find(names.begin(), names.end(), t.name) == names.end()) names.push_back(t.name);
  return names;
}

// A CPU level by its target name: the `requires` of the first spec target so named.
Platform cpu_level(const std::string& name) {
  for (const OpSchema* s : detail::all_op_schemas())
    if (s->has_backend("cpu"))
      if (const TargetDef* t = s->backend("cpu").find_target(name)) return {name, false, t->requires_features};
  throw InvalidArgument(fmt::format("bundle build: --arch {}: not a CPU target (expected one of {})", name,
                                    fmt::join(cpu_target_names(), ", ")));
}

// "sm_90a", "sm90a", "sm_86", "sm_100a" -> compute capability (9, 0), (8, 6), (10, 0).
Platform cuda_arch(const std::string& name) {
  std::string_view d = name;
  if (d.starts_with("sm_")) d.remove_prefix(3);
  else if (d.starts_with("sm")) d.remove_prefix(2);
  if (d.ends_with('a')) d.remove_suffix(1);
  const bool digits =
      d.size() >= 2 && d.size() <= 3 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !name.starts_with("sm"))
    throw InvalidArgument(fmt::format("bundle build: --arch {}: expected a CUDA arch such as sm_90a, sm_80 or sm_86", name));
  const int cc = std::stoi(std::string(d));
  return {name, false, {}, cc / 10, cc % 10};
}

std::vector<Platform> platforms(const BundleBuildRequest& req) {
  std::vector<Platform> out;
  if (req.backend == "cpu" && req.archs.empty()) out.push_back({"host", true, {}});
  if (req.backend == "cuda" && req.archs.empty())
    throw InvalidArgument("bundle build: --backend cuda needs --arch (e.g. sm_90a or sm_80): a bundle is built for "
                          "the devices it will run on, not for this machine");
  for (const std::string& a : req.archs) out.push_back(req.backend == "cpu" ? cpu_level(a) : cuda_arch(a));
  return out;
}

// The spec target an op runs on the platform, or nullptr.
const TargetDef* target_on(const OpSchema& s, const std::string& backend, const Platform& p) {
  if (backend == "cuda") return engine::cuda_target_for(s, p.major, p.minor);
  const BackendDef& cpu = s.backend("cpu");
  return p.host ? cpu.find_target(engine::host_cpu_target(cpu.targets)) : engine::cpu_target_for(s, p.features);
}

std::string arch_on(const VariantKey& key, const Platform& p) {
  if (key.backend == "cpu") return {};
#if EJK_HAVE_CUDA
  return engine::cubin_arch(key, p.major, p.minor);
#else
  (void)p;
  throw BackendUnavailable("bundle build: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)");
#endif
}

const engine::OpDef* op_for(const OpSchema& s) {
  for (const engine::OpDef* op : engine::all_ops())
    if (&op->schema() == &s) return op;
  return nullptr;  // an internal op: no companions
}

// The jobs in the order they were selected, each (key, arch) once, with the companion kernels
// their launches need (a bundle must serve its keys without a compiler).
class JobList {
 public:
  void add(const OpSchema& s, const VariantKey& key, const Platform& p) {
    Job j{&s, key, arch_on(key, p)};
    if (!seen_.emplace(to_string(key), j.arch).second) return;
    jobs_.push_back(std::move(j));
    if (const engine::OpDef* op = op_for(s))
      for (const VariantKey& c : op->companions(key)) add(detail::op_schema(c.op), c, p);
  }
  std::vector<Job> take() { return std::move(jobs_); }

 private:
  std::vector<Job> jobs_;
  std::set<std::pair<std::string, std::string>> seen_;
};

void add_aot_keys(JobList& jobs, const BundleBuildRequest& req, const std::vector<Platform>& on) {
  if (req.variants.empty()) return;
  const Pattern re(req.variants, "bundle build: --variants");
  for (const OpSchema* s : detail::all_op_schemas()) {
    if (!s->has_backend(req.backend)) continue;
    for (const Platform& p : on)
      if (const TargetDef* t = target_on(*s, req.backend, p))
        for (const VariantKey& key : s->aot_keys(req.backend))
          if (key.target == t->name && re.search(to_string(key))) jobs.add(*s, key, p);
  }
}

// An exact key goes to each platform whose target for its op is the key's; a CPU key without
// --arch is taken as it is (it runs where its target is the host's).
void add_exact_key(JobList& jobs, const BundleBuildRequest& req, const std::vector<Platform>& on,
                   const std::string& text) {
  const OpSchema& s = detail::op_schema(text.substr(0, text.find('.')));
  const VariantKey key = s.parse_key(text);
  s.validate(key);
  if (key.backend != req.backend)
    throw InvalidArgument(fmt::format("bundle build: --key {}: a {} key, and --backend is {}", text, key.backend,
                                      req.backend));
  bool placed = false;
  for (const Platform& p : on) {
    const TargetDef* t = target_on(s, req.backend, p);
    if ((t && t->name == key.target) || p.host) {
      jobs.add(s, key, p);
      placed = true;
    }
  }
  if (!placed)
    throw InvalidArgument(fmt::format("bundle build: --key {}: {} does not run target {} on any --arch given ({})",
                                      text, s.api(), key.target, fmt::join(req.archs, ", ")));
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// MemAvailable from /proc/meminfo, else the free physical pages.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  uint64_t kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit)
    if (name == "MemAvailable:") return kb * 1024;
  return uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
}

std::pair<int, std::string> job_bound(int requested) {
  const int cores = available_cores();
  const uint64_t memory = available_memory();
  const int by_memory = int(std::max<uint64_t>(1, memory / kMemoryPerCompile));
  const int bound = std::min(cores, by_memory);
  const int jobs = requested > 0 ? std::min(requested, bound) : bound;
  const std::string asked = requested > 0 ? fmt::format("--jobs {}; ", requested) : "";
  return {jobs, fmt::format("{}{} cores, {:.1f} GiB available at {} MiB per compile", asked, cores,
                            double(memory) / (1 << 30), kMemoryPerCompile >> 20)};
}

void check_backend(const std::string& backend) {
  if (backend == "cpu") {
    if (!cpu_jit_available())
      throw BackendUnavailable("bundle build: compiling CPU variants needs the CPU JIT (this build was configured "
                               "with EJK_ENABLE_ORC_JIT=OFF)");
    return;
  }
#if EJK_HAVE_CUDA
  cuda::NvrtcCompiler::get();  // BackendUnavailable naming what was tried
#else
  throw BackendUnavailable("bundle build: this build has no CUDA backend (configured with EJK_ENABLE_CUDA=OFF)");
#endif
}

struct Compiled {
  bundle::Entry entry;
  VariantSource source = VariantSource::jit;
};

Compiled compile_entry(const Job& j) {
  engine::Binary b = engine::compile_binary(*j.schema, j.key, j.arch);
  bundle::EntryMeta meta{j.key.backend, to_string(j.key), j.key.target, b.arch, b.compiler, b.hash};
  return {bundle::make_entry(std::move(meta), b.bytes), b.source};
}

// Runs the jobs on `threads` workers; the first failure stops the others and is rethrown.
std::vector<bundle::Entry> compile_all(const std::vector<Job>& jobs, int threads, const BundleBuildRequest& req) {
  std::vector<bundle::Entry> out(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t done = 0;
  std::exception_ptr error;
  auto work = [&] {
    while (!failed) {
      const size_t i = next++;
      if (i >= jobs.size()) return;
      try {
        const auto t0 = std::chrono::steady_clock::now();
        Compiled c = compile_entry(jobs[i]);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::lock_guard lk(mu);
        out[i] = std::move(c.entry);
        if (req.progress)
          req.progress({++done, jobs.size(), out[i].meta.key, out[i].meta.arch, std::string(source_name(c.source)), s,
                        threads, {}});
      } catch (...) {
        std::lock_guard lk(mu);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace

BundleBuildReport build_bundle(const BundleBuildRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  if (req.out.empty()) throw InvalidArgument("bundle build: --out: expected the bundle file to write");
  bundle::check_output_path(req.out, "bundle build: --out");  // before the compile, not after
  if (req.variants.empty() && req.keys.empty())
    throw InvalidArgument("bundle build: expected --variants REGEX (over the specs' AOT keys) or --key KEY");
  if (req.backend != "cpu" && req.backend != "cuda")
    throw InvalidArgument(fmt::format("bundle build: --backend {}: expected cpu or cuda", req.backend));
  const std::vector<Platform> on = platforms(req);
  JobList list;
  add_aot_keys(list, req, on);
  for (const std::string& k : req.keys) add_exact_key(list, req, on, k);
  const std::vector<Job> jobs = list.take();
  if (jobs.empty())
    throw InvalidArgument(fmt::format("bundle build: no {} key of the specs' AOT sets matches --variants '{}' for {}",
                                      req.backend, req.variants,
                                      req.archs.empty() ? "this host" : fmt::format("--arch {}", fmt::join(req.archs, ","))));
  check_backend(req.backend);  // after the keys: a request that selects nothing says so wherever it runs
  auto [threads, why] = job_bound(req.jobs);
  threads = std::min<int>(threads, int(jobs.size()));
  if (req.progress) req.progress({0, jobs.size(), {}, {}, {}, 0, threads, why});
  std::vector<bundle::Entry> entries = compile_all(jobs, threads, req);
  BundleBuildReport rep;
  rep.entries = entries.size();
  rep.jobs = threads;
  for (const bundle::Entry& e : entries) rep.size += e.size;
  const std::vector<uint8_t> bytes = bundle::encode_bundle(std::move(entries), generated::kGeneratorVersion);
  rep.stored_size = bytes.size();
  std::error_code ec;
  if (req.out.has_parent_path()) fs::create_directories(req.out.parent_path(), ec);
  bundle::write_bundle(req.out, bytes);  // checks the path again: it may have changed meanwhile
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace ejk
