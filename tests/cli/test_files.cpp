// The CLI's file access (cli/files.h): regular files only, no symlinks followed, no device or
// FIFO opened for writing, and a failed write is an error rather than a short file.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ejk/core/error.h"
#include "files.h"
#include "host_case.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("ejk-files-" + std::to_string(getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("files: reads take regular files only, without blocking on a FIFO", "[files]") {
  TempDir d;
  const fs::path fifo = d.path / "fifo", link = d.path / "link", file = d.path / "file";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::ofstream(file) << "12345";
  fs::create_symlink(file, link);
  CHECK_THAT(error_of([&] { ejk::cli::ReadFile(fifo, "--load"); }), ContainsSubstring("is a FIFO"));
  CHECK_THAT(error_of([&] { ejk::cli::ReadFile(link, "--load"); }), ContainsSubstring("is a symlink"));
  CHECK_THAT(error_of([&] { ejk::cli::ReadFile(d.path, "--load"); }), ContainsSubstring("is a directory"));
  CHECK_THAT(error_of([&] { ejk::cli::read_small_file(file, 4, "--load"); }), ContainsSubstring("more than the 4"));
  CHECK(ejk::cli::read_small_file(file, 5, "--load") == "12345");
}

TEST_CASE("files: writes create new files or truncate this user's regular ones", "[files]") {
  TempDir d;
  const ejk::cli::WriteDir dir(d.path / "out", "--save");
  REQUIRE(::mkfifo((d.path / "out" / "fifo").c_str(), 0600) == 0);
  fs::create_symlink(d.path / "victim", d.path / "out" / "link");
  CHECK_THAT(error_of([&] { ejk::cli::WriteFile(dir, "fifo"); }), ContainsSubstring("is a FIFO"));
  CHECK_THAT(error_of([&] { ejk::cli::WriteFile(dir, "link"); }), ContainsSubstring("symlink"));
  CHECK_FALSE(fs::exists(d.path / "victim"));
  CHECK_THAT(error_of([&] { ejk::cli::WriteFile(fs::path("/dev/null"), "--out"); }), ContainsSubstring("is a device"));
  CHECK_THAT(error_of([&] { ejk::cli::WriteDir(d.path / "out" / "link", "--save"); }), ContainsSubstring("--save"));
  {
    ejk::cli::WriteFile f(dir, "new");
    f.write("abc");
    f.close();
  }
  {
    ejk::cli::WriteFile f(dir, "new");  // replaced, not appended
    f.write("z");
    f.close();
  }
  std::ifstream in(d.path / "out" / "new");
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "z");
}

TEST_CASE("files: a write the disk refuses is an error, not a short file", "[files]") {
  TempDir d;
  ejk::cli::HostCase c;
  c.op = "mean_pooling";
  ejk::Tensor x = ejk::Tensor::empty({64, 64}, ejk::DType::f32);
  c.inputs.emplace_back("x", x);
  // A file size limit stands in for a full disk: write() then fails with EFBIG.
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  auto* prev = ::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string why = error_of([&] { ejk::cli::save_case(c, {}, d.path / "case"); });
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, prev);
  CHECK_THAT(why, ContainsSubstring("write failed"));
  CHECK_THAT(why, ContainsSubstring("x.npy"));
}
