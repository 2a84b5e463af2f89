// The flash forward's bias copy (flash_fwd_bias_rows.cuh, a plan's companion kernel) on a GPU:
// the kernel itself bit for bit at any alignment and stride, and what the launcher leaves in
// the stream's scratch before the flash kernel reads it. SKIPs with the reason without a GPU.
#include <catch2/catch_test_macros.hpp>

#include "device_case.h"

namespace ejk::test {
namespace {

// A plan holding only the copy, as kernel 1 (the place a bias key's plan gives it).
engine::PlanData copy_plan(const std::string& target) {
  const std::vector<VariantKey> companions =
      ops::flash_attention_op().companions(cuda_key(target, "bf16", 64, 64, 32, {"bias"}));
  REQUIRE(companions.size() == 1);
  engine::PlanData plan;
  plan.backend = Backend::cuda;
  plan.device = Device{DeviceKind::cuda, 0};
  engine::Variant copy;
  copy.cuda = loaded_kernel(companions[0]);
  plan.companions.push_back(std::move(copy));
  return plan;
}

// Sources at every 2-byte alignment, odd and broadcast strides and key counts around the 8-key
// chunk: every row bit for bit, the keys past the row zero. The source buffers end at the last
// element read, so a read past the tensor shows under compute-sanitizer memcheck. Grids of one
// block (every warp walks many rows, heads and batches) and of one warp per row.
TEST_CASE("the bias copy keeps every row bit for bit at any alignment and stride", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name);
  std::mt19937_64 rng(seed);
  const engine::PlanData plan = copy_plan(device_target());
  engine::StreamWorkspace& ws = engine::stream_workspace(dev.ordinal, nullptr);
  const engine::CudaLaunchContext lc(dev, nullptr, plan, ws);
  const cuda::CudaDriver& d = cuda::CudaDriver::get();
  for (int64_t keys : {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1001}) {
    for (int64_t offset = 0; offset < 8; ++offset) {  // elements past a 16-byte boundary
      // Plain rows with a gap; heads broadcast; rows broadcast.
      for (int layout = 0; layout < 3; ++layout) {
        FlashFwdBiasRows c{};
        const int64_t nb = 2, rows = layout == 2 ? 1 : 37;
        c.batches = nb, c.heads = layout == 1 ? 1 : 3, c.rows = rows, c.keys = keys;
        c.stride_q = layout == 2 ? 0 : keys + int64_t(rng() % 4);
        c.stride_h = layout == 1 ? 0 : rows * std::max<int64_t>(c.stride_q, keys) + int64_t(rng() % 3);
        c.stride_b = c.heads * std::max<int64_t>(c.stride_h, rows * std::max<int64_t>(c.stride_q, keys)) + 1;
        const int64_t rows_total = nb * c.heads * rows;
        c.pitch = flash_fwd_bias_pitch(keys);
        // The source ends at its last element: (nb-1, heads-1, rows-1, keys-1).
        const int64_t extent = (nb - 1) * c.stride_b + (c.heads - 1) * c.stride_h + (rows - 1) * c.stride_q + keys;
        std::vector<uint16_t> host(size_t(offset + extent));
        for (auto& x : host) x = uint16_t(rng());
        DeviceBuffer src(host), dst(size_t(rows_total * c.pitch) * 2);
        d.check(d.cuMemsetD8(dst.ptr(), 0xff, size_t(rows_total * c.pitch) * 2), "poisoning dst");
        c.src = src.as<uint16_t>() + offset;
        c.dst = dst.as<uint16_t>();
        const engine::Grid grid = offset % 2 ? engine::Grid{1, 1, 1}
                                             : engine::Grid{unsigned((rows + 7) / 8), unsigned(c.heads), unsigned(nb)};
        void* args[] = {&c};
        lc.launch(1, grid, 256, 0, args);
        d.check(d.cuCtxSynchronize(), "running the bias copy");
        const std::vector<uint16_t> got = to_host<uint16_t>(dst.ptr(), size_t(rows_total * c.pitch));
        size_t wrong = 0;
        for (int64_t row = 0; row < rows_total; ++row) {
          const int64_t plane = row / rows, r = row % rows, b = plane / c.heads, h = plane % c.heads;
          const int64_t at = offset + b * c.stride_b + h * c.stride_h + r * c.stride_q;
          for (int64_t k = 0; k < c.pitch; ++k)
            wrong += got[size_t(row * c.pitch + k)] != (k < keys ? host[size_t(at + k)] : 0);
        }
        INFO("keys " << keys << " offset " << offset << " layout " << layout << " strides " << c.stride_b << "/"
                     << c.stride_h << "/" << c.stride_q << " grid " << grid.x << "x" << grid.y << "x" << grid.z);
        CHECK(wrong == 0);
      }
    }
  }
}

// launch_flash_fwd's copy of a bias at an odd address: the rows in the stream's scratch are the
// caller's bias bit for bit with the broadcast axes kept at 1 (flash_fwd_bias_extent) and zeros
// past Sk, on a device of one SM (the copy's warps walk rows) and of the device's SMs.
TEST_CASE("the launcher's bias copy leaves the caller's rows in the stream's scratch", "[device]") {
  const cuda::DeviceInfo& dev = device_or_skip();
  const std::string& target = device_target();
  const uint64_t seed = fresh_seed();
  INFO("seed " << seed << ", device " << dev.name << ", target " << target);
  std::mt19937_64 rng(seed);
  const VariantKey key = cuda_key(target, "bf16", 64, 64, 32, {"bias"});
  const engine::PlanData plan = flash_plan(key);
  for (int layout = 0; layout < 4; ++layout)
    for (int sms : {1, dev.sm_count}) {
      check::Problem pr;
      pr.batch = 3, pr.heads_q = 4, pr.heads_kv = 1, pr.seqlen_q = 45, pr.seqlen_k = 333;
      pr.bias_bcast_b = layout == 1, pr.bias_bcast_h = layout == 2, pr.bias_bcast_q = layout == 3;
      DeviceCase c(key, pr, rng, {.bias_offset = 3});
      const ops::FlashLaunchShape shape = c.shape(plan, sms);
      const size_t bytes = ops::bias_copy_bytes(c.params(), shape.bias_chunks);
      const FlashFwdBiasExtent e = flash_fwd_bias_extent(c.params());
      const int64_t pitch = pr.bias_pitch();  // the reference's rows: Sk rounded up to 8, as the copy's
      REQUIRE(bytes == size_t(e.batches * e.heads * e.rows * pitch) * 2);
      cuda::DeviceInfo launcher = dev;
      launcher.sm_count = sms;
      c.launch(plan, launcher, sms);
      EJK_CHECK_OUTCOME(c.outcome());
      const void* scratch = engine::stream_workspace(dev.ordinal, nullptr).scratch();
      const std::vector<uint16_t> got = to_host<uint16_t>(reinterpret_cast<cuda::CUdeviceptr>(scratch), bytes / 2);
      const std::vector<uint16_t>& host = c.inputs().bias;  // the same layout, random past Sk
      REQUIRE(host.size() == got.size());
      size_t wrong = 0;
      for (size_t i = 0; i < got.size(); ++i)
        wrong += got[i] != (int64_t(i) % pitch < pr.seqlen_k ? host[i] : 0);
      INFO("layout " << layout << ", " << sms << " SMs");
      CHECK(wrong == 0);
    }
}

}  // namespace
}  // namespace ejk::test
