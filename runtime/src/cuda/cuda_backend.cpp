#include "cuda/cuda_backend.h"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>

#include "ejk/core/error.h"
#include "ejk/kernels/cuda/flash_fwd_traits.cuh"

namespace ejk::cuda {

std::string target_for_capability(int major, int minor) {
  if (major < 8)
    throw BackendUnavailable("CUDA device of compute capability " + std::to_string(major) + "." +
                             std::to_string(minor) + ": the kernels need 8.0 or newer");
  return major == 9 && minor == 0 ? "sm90a" : "sm80";
}

namespace {

DeviceInfo query_device(const CudaDriver& d, int ordinal, CUdevice dev) {
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  d.check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  d.check(d.cuDeviceGetAttribute(&info.major, kAttrComputeCapabilityMajor, dev), "compute capability");
  d.check(d.cuDeviceGetAttribute(&info.minor, kAttrComputeCapabilityMinor, dev), "compute capability");
  d.check(d.cuDeviceGetAttribute(&info.sm_count, kAttrMultiprocessorCount, dev), "multiprocessor count");
  d.check(d.cuDeviceGetAttribute(&info.max_smem_optin, kAttrMaxSharedMemoryPerBlockOptin, dev),
          "max shared memory per block (opt-in)");
  info.target = target_for_capability(info.major, info.minor);
  return info;
}

}  // namespace

const DeviceInfo& use_device(int ordinal) {
  const CudaDriver& d = CudaDriver::get();
  struct Entry {
    CUcontext ctx;
    DeviceInfo info;
  };
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Entry>> devices;  // retained for the process lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto it = devices.find(ordinal);
  if (it == devices.end()) {
    int count = 0;
    d.check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
      throw InvalidArgument("CUDA device index " + std::to_string(ordinal) + ": expected 0.." +
                            std::to_string(count - 1));
    CUdevice dev = 0;
    d.check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    auto e = std::make_unique<Entry>();
    d.check(d.cuDevicePrimaryCtxRetain(&e->ctx, dev), "cuDevicePrimaryCtxRetain");
    e->info = query_device(d, ordinal, dev);
    it = devices.emplace(ordinal, std::move(e)).first;
  }
  d.check(d.cuCtxSetCurrent(it->second->ctx), "cuCtxSetCurrent");
  return it->second->info;
}

LoadedKernel::LoadedKernel(const std::vector<uint8_t>& cubin, const std::string& symbol)
    : symbol_(symbol) {
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuModuleLoadData(&module_, cubin.data()), ("loading the cubin of " + symbol).c_str());
  if (CUresult r = d.cuModuleGetFunction(&fn_, module_, symbol.c_str()); r != 0) {
    d.cuModuleUnload(module_);
    d.check(r, ("kernel symbol " + symbol + " in its cubin").c_str());
  }
}

LoadedKernel::~LoadedKernel() {
  if (const CudaDriver* d = CudaDriver::load(); d != nullptr && module_ != nullptr)
    d->cuModuleUnload(module_);  // errors at teardown are not actionable
}

KernelResources LoadedKernel::resources() const {
  const CudaDriver& d = CudaDriver::get();
  KernelResources r;
  int local = 0;
  d.check(d.cuFuncGetAttribute(&r.registers, kFuncAttrNumRegs, fn_), "registers of a kernel");
  d.check(d.cuFuncGetAttribute(&local, kFuncAttrLocalSizeBytes, fn_), "local memory of a kernel");
  d.check(d.cuFuncGetAttribute(&r.static_smem_bytes, kFuncAttrSharedSizeBytes, fn_),
          "static shared memory of a kernel");
  r.stack_bytes = local;  // the driver reports stack frame and spills as one local size
  return r;
}

void LoadedKernel::reserve_dynamic_smem(int bytes) {
  if (bytes <= dynamic_smem_) return;
  const CudaDriver& d = CudaDriver::get();
  d.check(d.cuFuncSetAttribute(fn_, kFuncAttrMaxDynamicSharedSizeBytes, bytes),
          ("raising the shared memory limit of " + symbol_).c_str());
  dynamic_smem_ = bytes;
}

int64_t flash_fwd_smem_bytes(std::string_view target, int64_t head_dim, int64_t block_q,
                             int64_t block_k, bool per_item, bool bias) {
  return flash_fwd_launch_facts(target == "sm90a", head_dim, block_q, block_k, per_item, bias)
      .smem_bytes;
}

LaunchShape flash_fwd_launch_shape(std::string_view target, int64_t head_dim, int64_t block_q,
                                   int64_t block_k, const FlashFwdParams& p, int sm_count,
                                   bool per_item, bool bias) {
  const FlashFwdLaunchFacts f =
      flash_fwd_launch_facts(target == "sm90a", head_dim, block_q, block_k, per_item, bias);
  if (!f.valid)
    throw InvalidArgument("CUDA flash_fwd variant d" + std::to_string(head_dim) + ".bq" +
                          std::to_string(block_q) + ".bk" + std::to_string(block_k) +
                          ": expected head_dim a multiple of 16 in [16, 256], block_q 64 or 128 "
                          "(or 192 at head_dim <= 64 on sm90a), block_k a multiple of 16 in "
                          "[16, 128] (on sm90a from 64: up to 256 where "
                          "the accumulators fit the registers and the tiles 227 KiB)");
  LaunchShape s;
  if (f.wgmma) {
    const FlashFwdSm90Geometry g{head_dim, block_q, block_k, 0, flash_fwd_schedule(per_item)};
    // The kernel decodes work items in 32-bit arithmetic (flash_fwd_sm90_schedule.cuh sm90_block).
    if (const int64_t items = g.work_items(p); items >= (int64_t{1} << 31))
      throw InvalidArgument("CUDA flash_fwd (sm90a): " + std::to_string(items) +
                            " work items (q blocks x heads x sequences); expected fewer than 2^31");
    s.grid[0] = unsigned(g.blocks(p, sm_count));  // 1-D
    s.tma = true;
  } else {
    const FlashFwdSm80Geometry g{head_dim, block_q, block_k};
    // One block per (q block, q head, sequence): heads on gridDim.y, sequences on gridDim.z,
    // sliced into launches of at most 65535 of each (slices of whole GQA groups). A 1-D grid
    // decoded in the kernel would need no slices, but changed nvcc's register allocation and
    // cost 15-20% on several keys (bench/cuda/NOTES.md v17).
    constexpr int64_t kMaxGridYZ = 65535;
    const int64_t group = p.heads_kv > 0 ? p.heads_q / p.heads_kv : 1;
    if (group > kMaxGridYZ)
      throw InvalidArgument("CUDA flash_fwd (sm80 family): " + std::to_string(group) +
                            " q heads per kv head; expected at most 65535 (CUDA grid limit)");
    if (g.grid_x(p) >= (int64_t{1} << 31))
      throw InvalidArgument("CUDA flash_fwd (sm80 family): " + std::to_string(g.grid_x(p)) +
                            " q blocks per sequence; expected fewer than 2^31");
    s.heads_q = g.grid_y(p), s.sequences = g.grid_z(p);
    s.grid[0] = unsigned(g.grid_x(p));
    s.grid[1] = unsigned(std::min(s.heads_q, kMaxGridYZ / group * group));
    s.grid[2] = unsigned(std::min(s.sequences, kMaxGridYZ));
  }
  s.block = unsigned(f.threads);
  s.smem_bytes = unsigned(f.smem_bytes);
  s.bias_chunks = f.bias_chunks;
  s.head_dim = head_dim, s.block_q = block_q, s.block_k = block_k;
  return s;
}

int64_t LaunchShape::launches() const {
  if (tma || grid[1] == 0 || grid[2] == 0) return 1;
  return ceil_div(heads_q, int64_t(grid[1])) * ceil_div(sequences, int64_t(grid[2]));
}

FlashFwdParams flash_fwd_slice(const FlashFwdParams& p, int64_t h0, int64_t nh, int64_t z0,
                               int64_t nz) {
  const int64_t group = p.heads_q / p.heads_kv;
  auto at = [](const void* base, int64_t elems) {
    return static_cast<const char*>(base) + elems * kElemBytesOf16Bit;
  };
  FlashFwdParams s = p;
  s.heads_q = nh, s.heads_kv = nh / group, s.batch = nz;
  // Heads: q, out, lse, bias and sinks per q head; k and v per kv head.
  s.q = at(p.q, h0 * p.q_stride_h);
  s.k = at(p.k, h0 / group * p.k_stride_h);
  s.v = at(p.v, h0 / group * p.v_stride_h);
  s.out = const_cast<char*>(at(p.out, h0 * p.o_stride_h));
  s.lse = p.lse + h0 * p.lse_stride_h;
  if (p.bias) s.bias = at(p.bias, h0 * p.bias_stride_h + z0 * p.bias_stride_b);
  if (p.softmax_aux) s.softmax_aux = p.softmax_aux + h0 * p.num_sinks;
  // Sequences: segment ids by sequence either way; dense tensors by their batch stride,
  // packed ones through cu_seqlens (absolute token offsets).
  if (p.q_segment_ids) s.q_segment_ids = p.q_segment_ids + z0 * p.q_seg_stride_b;
  if (p.kv_segment_ids) s.kv_segment_ids = p.kv_segment_ids + z0 * p.kv_seg_stride_b;
  if (p.cu_seqlens_q != nullptr) {
    s.cu_seqlens_q = p.cu_seqlens_q + z0;
    s.cu_seqlens_k = p.cu_seqlens_k + z0;
  } else {
    s.q = at(s.q, z0 * p.q_stride_b);
    s.k = at(s.k, z0 * p.k_stride_b);
    s.v = at(s.v, z0 * p.v_stride_b);
    s.out = const_cast<char*>(at(s.out, z0 * p.o_stride_b));
    s.lse += z0 * p.lse_stride_b;
  }
  return s;
}

namespace {

void require_chunked(const void* ptr, std::initializer_list<int64_t> strides, const char* name) {
  bool ok = reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  for (int64_t s : strides) ok = ok && s % 8 == 0;
  if (!ok)
    throw InvalidArgument(std::string("CUDA flash_fwd: ") + name +
                          " must be 16-byte aligned with batch/sequence/head strides that are "
                          "multiples of 8 elements");
}

// The q, k, v and out tensor maps of the sm90a family, and the bias's for a key that stages it
// (flash_fwd_tma_view says what each covers).
FlashFwdTensorMaps encode_tensor_maps(const CudaDriver& d, const FlashFwdParams& p,
                                      const LaunchShape& shape) {
  const FlashFwdSm90Geometry g{shape.head_dim, shape.block_q, shape.block_k};
  FlashFwdTensorMaps maps{};
  for (FlashTensor t : flash_fwd_tensors(p, shape.bias_chunks)) {
    const TmaTensorView v = flash_fwd_tma_view(p, t, g);
    const char* name = flash_tensor_name(t);
    // The copy engine's limits, and the kernel's 32-bit row coordinates.
    for (u64 st : v.strides)
      if (st >= (u64(1) << 40))
        throw InvalidArgument(std::string("CUDA flash_fwd (sm90a): ") + name +
                              " has a stride of 2^40 bytes or more, beyond what TMA addresses");
    if (v.dims[1] >= (u64(1) << 31) || v.dims[2] >= (u64(1) << 31) || v.dims[3] >= (u64(1) << 31))
      throw InvalidArgument(std::string("CUDA flash_fwd (sm90a): ") + name +
                            " has 2^31 rows, heads or sequences or more");
    uint64_t dims[4], strides[3];
    for (int i = 0; i < 4; ++i) dims[i] = v.dims[i];
    for (int i = 0; i < 3; ++i) strides[i] = v.strides[i];
    const unsigned ones[4] = {1, 1, 1, 1};
    d.check(d.cuTensorMapEncodeTiled(&tensor_map(maps, t), kTensorMapUint16, 4, const_cast<void*>(v.base),
                                     dims, strides, v.box, ones, /*interleave=*/0,
                                     kTensorMapSwizzle128B, kTensorMapL2Promotion256B,
                                     kTensorMapOobFillZero),
            (std::string("encoding the TMA descriptor of ") + name).c_str());
  }
  return maps;
}

// FlashFwdParams::tile_counter for the sm90a launches on `stream` of device `ordinal`: 8 bytes,
// allocated and zeroed on first use and kept for the process. One per stream: launches on a
// stream run one after another and each leaves its counter zero (flash_fwd_sm90_schedule.cuh
// sm90_draw); launches on two streams may overlap and must not share one.
u32* tile_counter(const CudaDriver& d, int ordinal, CUstream stream) {
  static std::mutex mu;
  static std::map<std::pair<int, CUstream>, CUdeviceptr> counters;
  std::lock_guard<std::mutex> lock(mu);
  CUdeviceptr& c = counters[{ordinal, stream}];
  if (c == 0) {
    CUdeviceptr fresh = 0;
    d.check(d.cuMemAlloc(&fresh, 2 * sizeof(u32)), "cuMemAlloc (flash_fwd tile counter)");
    const u32 zero[2] = {0, 0};
    d.check(d.cuMemcpyHtoD(fresh, zero, sizeof(zero)), "cuMemcpyHtoD (flash_fwd tile counter)");
    c = fresh;
  }
  return reinterpret_cast<u32*>(c);
}

// Scratch of at least `bytes` for align_bias on `stream` of device `ordinal`, kept for the
// process and grown in stream order (the old buffer freed after the work already queued on the
// stream): one per stream, as tile_counter, since launches on one stream run one after another.
// Allocating and freeing it per launch cost ~2 ms for a 0.5 GB bias (bench/cuda/NOTES.md
// session 23): freed pool memory goes back to the device at the next synchronisation.
CUdeviceptr bias_scratch(const CudaDriver& d, int ordinal, CUstream stream, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, CUstream>, std::pair<CUdeviceptr, size_t>> buffers;
  std::lock_guard<std::mutex> lock(mu);
  auto& [ptr, size] = buffers[{ordinal, stream}];
  if (size < bytes) {
    if (ptr != 0) d.check(d.cuMemFreeAsync(ptr, stream), "cuMemFreeAsync (flash_fwd bias rows)");
    ptr = 0, size = 0;
    d.check(d.cuMemAllocAsync(&ptr, bytes, stream), "cuMemAllocAsync (flash_fwd bias rows)");
    size = bytes;
  }
  return ptr;
}

std::string hex(uintptr_t v) {
  char buf[2 + 2 * sizeof(v)] = {'0', 'x'};
  return std::string(buf, std::to_chars(buf + 2, std::end(buf), v, 16).ptr);
}

// Where `kernel` cannot read p's bias [B|1, Hq|1, rows, keys] as it is (bias_reads_in_place),
// copies it with `copy` into rows whose pitch is a multiple of 8 elements (what both the TMA
// boxes and the 4-byte pairs read in place) in the stream's scratch, and points p there.
void align_bias(const LoadedKernel& kernel, const LoadedKernel* copy, FlashFwdParams& p,
                bool chunks, const DeviceInfo& device, CUstream stream) {
  if (bias_reads_in_place(p, chunks)) return;
  if (copy == nullptr)
    throw InvalidArgument("CUDA flash_fwd " + kernel.symbol() + ": its bias (base " +
                          hex(reinterpret_cast<uintptr_t>(p.bias)) + ", strides " +
                          std::to_string(p.bias_stride_b) + "/" + std::to_string(p.bias_stride_h) +
                          "/" + std::to_string(p.bias_stride_q) + ", " + std::to_string(p.seqlen_k) +
                          " keys) is not aligned for in-place reads, and no bias copy kernel "
                          "(flash_fwd_bias_rows) was given");
  // The rows the kernels index: positions in a sequence (varlen: the longest; the runtime
  // takes no bias with varlen, the kernel tests do).
  FlashFwdBiasRows c{};
  c.src = static_cast<const u16*>(p.bias);
  c.stride_b = p.bias_stride_b, c.stride_h = p.bias_stride_h, c.stride_q = p.bias_stride_q;
  const FlashFwdBiasExtent e = flash_fwd_bias_extent(p);
  c.batches = e.batches, c.heads = e.heads, c.rows = e.rows;  // broadcast axes stay so
  c.keys = p.seqlen_k;
  c.pitch = flash_fwd_bias_pitch(c.keys);
  const size_t bytes = size_t(c.batches * c.heads * c.rows) * size_t(c.pitch) * kElemBytesOf16Bit;
  c.dst = reinterpret_cast<u16*>(bias_scratch(CudaDriver::get(), device.ordinal, stream, bytes));
  copy_bias_rows(*copy, c, device.sm_count, stream);
  p.bias = c.dst;
  p.bias_stride_q = p.bias_stride_q == 0 ? 0 : c.pitch;
  p.bias_stride_h = c.heads > 1 ? c.rows * c.pitch : 0;
  p.bias_stride_b = c.batches > 1 ? c.heads * c.rows * c.pitch : 0;
}

}  // namespace

void copy_bias_rows(const LoadedKernel& copy, const FlashFwdBiasRows& rows, int sm_count,
                    CUstream stream) {
  const int64_t planes = rows.batches * rows.heads;
  if (planes == 0 || rows.rows == 0 || rows.keys == 0) return;
  constexpr int64_t kWarps = 8;  // per block of 256 threads: one row each at a time
  // Blocks over (rows, heads, batches), about one wave (8 per SM) in all; the kernel's warps walk
  // the rest, as they do past the grid's 65535 heads or batches.
  const int64_t per_plane = std::max<int64_t>(1, 8 * int64_t(sm_count) / planes);
  const unsigned gx = unsigned(std::min<int64_t>(ceil_div<int64_t>(rows.rows, kWarps), per_plane));
  const unsigned gy = unsigned(std::min<int64_t>(rows.heads, 65535));
  const unsigned gz = unsigned(std::min<int64_t>(rows.batches, 65535));
  const CudaDriver& d = CudaDriver::get();
  FlashFwdBiasRows arg = rows;
  void* args[] = {&arg};
  d.check(d.cuLaunchKernel(copy.function(), gx, gy, gz, 32 * kWarps, 1, 1, 0, stream, args, nullptr),
          ("launching " + copy.symbol()).c_str());
}

bool bias_reads_in_place(const FlashFwdParams& p, bool chunks) {
  if (p.bias == nullptr) return true;
  // Elements per aligned unit (a power of 2): the TMA's 16 bytes, or a pair of keys.
  const int64_t unit = chunks ? 8 : 2;
  // The TMA reads no key past the map's Sk (the copy's source size); a pair reads key len_k
  // beside key len_k - 1, which an even extent holds.
  const int64_t extent = chunks ? 0 : p.seqlen_k;
  return reinterpret_cast<uintptr_t>(p.bias) % uintptr_t(2 * unit) == 0 &&
         ((p.bias_stride_b | p.bias_stride_h | p.bias_stride_q | extent) & (unit - 1)) == 0;
}

void launch_flash_fwd(LoadedKernel& kernel, const LaunchShape& shape, const FlashFwdParams& p,
                      const DeviceInfo& device, CUstream stream, const LoadedKernel* bias_copy) {
  require_chunked(p.q, {p.q_stride_b, p.q_stride_s, p.q_stride_h}, "q");
  require_chunked(p.k, {p.k_stride_b, p.k_stride_s, p.k_stride_h}, "k");
  require_chunked(p.v, {p.v_stride_b, p.v_stride_s, p.v_stride_h}, "v");
  require_chunked(p.out, {p.o_stride_b, p.o_stride_s, p.o_stride_h}, "out");
  if (int64_t(shape.smem_bytes) > device.max_smem_optin)
    throw InvalidArgument("CUDA flash_fwd " + kernel.symbol() + " needs " +
                          std::to_string(shape.smem_bytes) + " bytes of shared memory; " +
                          device.name + " allows " + std::to_string(device.max_smem_optin) +
                          ": use a smaller block_q/block_k");
  if (shape.grid[0] == 0 || shape.grid[1] == 0 || shape.grid[2] == 0) return;  // empty problem
  kernel.reserve_dynamic_smem(int(shape.smem_bytes));
  const CudaDriver& d = CudaDriver::get();
  // The kernel takes FlashFwdParams and the tensor maps by value (__grid_constant__): one
  // pointer to a copy of each. The sm80 family ignores the (zero) maps.
  FlashFwdParams params = p;  // what every launch gets, sliced for sm80 launches past 65535
  align_bias(kernel, bias_copy, params, shape.bias_chunks, device, stream);
  // After align_bias: a staged bias's map covers the rows the kernel reads.
  FlashFwdTensorMaps maps = shape.tma ? encode_tensor_maps(d, params, shape) : FlashFwdTensorMaps{};
  if (shape.tma && params.tile_counter == nullptr)
    params.tile_counter = tile_counter(d, device.ordinal, stream);
  auto launch = [&](FlashFwdParams copy, unsigned grid_y, unsigned grid_z) {
    void* args[] = {&copy, &maps};
    d.check(d.cuLaunchKernel(kernel.function(), shape.grid[0], grid_y, grid_z, shape.block, 1, 1,
                             shape.smem_bytes, stream, args, nullptr),
            ("launching " + kernel.symbol()).c_str());
  };
  if (shape.launches() == 1) return launch(params, shape.grid[1], shape.grid[2]);
  const int64_t head_chunk = shape.grid[1], seq_chunk = shape.grid[2];
  for (int64_t z0 = 0; z0 < shape.sequences; z0 += seq_chunk)
    for (int64_t h0 = 0; h0 < shape.heads_q; h0 += head_chunk) {
      const int64_t nh = std::min(head_chunk, shape.heads_q - h0);
      const int64_t nz = std::min(seq_chunk, shape.sequences - z0);
      launch(flash_fwd_slice(params, h0, nh, z0, nz), unsigned(nh), unsigned(nz));
    }
}

}  // namespace ejk::cuda
