// The public bundle API in one process: build_bundle writes a bundle, load_bundle registers it,
// a call then runs its variant from it (RunInfo.source) and matches the reference;
// inspect_bundle; load_bundle and ejk_load_bundle refusing what they cannot use.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "ejk/bundle.h"
#include "ejk/core/error.h"
#include "ejk/ejk.h"
#include "ejk/op.h"
#include "ejk/ops/flash_attention.h"

using namespace ejk;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

Tensor random_f32(Dims shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(rng);
  return t;
}

// A temp directory, also the process's cache (EJK_CACHE_DIR), removed afterwards.
struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("ejk-bundle-api-" + std::to_string(getpid()));
  TempDir() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    setenv("EJK_CACHE_DIR", (dir / "cache").c_str(), 1);
  }
  ~TempDir() { fs::remove_all(dir); }
};

// head_dim 80: outside every AOT set, so only a bundle or the JIT has it.
struct Problem {
  Tensor q = random_f32({1, 21, 2, 80}, 1), k = random_f32({1, 21, 2, 80}, 2), v = random_f32({1, 21, 2, 80}, 3);
  Args args() const {
    Args a;
    a.set("q", q.view()).set("k", k.view()).set("v", v.view()).set("causal", true);
    return a;
  }
};

fs::path build_one(const fs::path& dir, const std::string& key) {
  BundleBuildRequest req;
  req.out = dir / "api.ejkb";
  req.keys = {key};
  const BundleBuildReport rep = build_bundle(req);
  REQUIRE(rep.entries == 1);
  REQUIRE(fs::file_size(req.out) == rep.stored_size);
  return req.out;
}

}  // namespace

TEST_CASE("a bundle from build_bundle, registered with load_bundle, serves the call", "[bundle][api]") {
  TempDir tmp;
  const Problem p;
  const std::string key = variant_key("flash_attention", p.args());
  const fs::path file = build_one(tmp.dir, key);
  CHECK(load_bundle(file) == 1);
  CHECK(load_bundle(file) == 0);  // registered once
  setenv("EJK_DISABLE_JIT", "1", 1);
  FlashAttentionOptions opt;
  opt.causal = true;
  const FlashAttentionResult r = flash_attention({p.q.view(), p.k.view(), p.v.view()}, opt);
  unsetenv("EJK_DISABLE_JIT");
  CHECK(r.info.key == key);
  CHECK(r.info.source == VariantSource::bundle);
  const std::vector<ReferenceOutput> ref = reference("flash_attention", p.args());
  REQUIRE(ref[0].name == "out");
  double worst = 0;
  for (size_t i = 0; i < ref[0].values.size(); ++i)
    worst = std::max(worst, std::abs(ref[0].values[i] - double(r.out.data_as<float>()[i])));
  CHECK(worst < 1e-4);
  const BundleInfo info = inspect_bundle(file, /*verify=*/true);
  CHECK(info.intact());
  REQUIRE(info.entries.size() == 1);
  CHECK(info.entries[0].key == key);
  CHECK(info.entries[0].current == std::optional<bool>(true));
}

TEST_CASE("load_bundle and ejk_load_bundle name the file and what is wrong with it", "[bundle][api]") {
  TempDir tmp;
  CHECK_THROWS_WITH(load_bundle(tmp.dir / "missing.ejkb"), ContainsSubstring("missing.ejkb"));
  CHECK(ejk_load_bundle(nullptr) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("path is NULL"));
  const fs::path text = tmp.dir / "text.ejkb";
  std::ofstream(text) << std::string(200, 'x');
  CHECK(ejk_load_bundle(text.c_str()) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("not an ejk bundle") && ContainsSubstring(text.string()));

  const fs::path file = build_one(tmp.dir, variant_key("flash_attention", Problem().args()));
  const fs::path future = tmp.dir / "future.ejkb";
  fs::copy_file(file, future);
  {
    std::fstream f(future, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put(char(7));
  }
  CHECK(ejk_load_bundle(future.c_str()) == EJK_INVALID_ARGUMENT);
  CHECK_THAT(ejk_last_error(), ContainsSubstring("format version 7 is newer than this library reads (version 1)"));
  CHECK(ejk_load_bundle(file.c_str()) == EJK_OK);
}
