// The .npy reader (issue 36, defects 2, 3 and 7): a strict header parser, overflow-checked
// sizes against the file, a size limit, u1 read as u8; every error names the file.
#include <sys/stat.h>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ejk/core/error.h"
#include "npy.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using ejk::cli::parse_npy_header;

namespace {

// A .npy file image: preamble of `version`, the header text padded like numpy pads it, data.
std::vector<uint8_t> npy_bytes(const std::string& dict, size_t data_bytes, int version = 1) {
  std::string header = dict;
  const size_t preamble = version == 1 ? 10 : 12;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(version), 0};
  for (size_t i = 0; i < preamble - 8; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0x5a);
  return out;
}

std::string dict(const std::string& descr, const std::string& shape) {
  return fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
}

std::string problem(const std::vector<uint8_t>& file) {
  try {
    parse_npy_header(file, file.size(), "t.npy");
  } catch (const ejk::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

struct TempFile {
  fs::path path = fs::temp_directory_path() / fmt::format("ejk-npy-test-{}.npy", ::getpid());
  ~TempFile() { fs::remove(path); }
  void write(const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
};

}  // namespace

TEST_CASE("npy: well-formed headers of every supported dtype", "[npy]") {
  struct Case { const char* descr; ejk::DType dtype; size_t size; };
  for (Case c : {Case{"<f4", ejk::DType::f32, 4}, {"<f8", ejk::DType::f64, 8}, {"<i4", ejk::DType::i32, 4},
                 {"<i8", ejk::DType::i64, 8}, {"<f2", ejk::DType::f16, 2}, {"|u1", ejk::DType::u8, 1}}) {
    CAPTURE(c.descr);
    auto file = npy_bytes(dict(c.descr, "(2, 3)"), 6 * c.size);
    auto layout = parse_npy_header(file, file.size(), "t.npy");
    CHECK(layout.dtype == c.dtype);
    CHECK(layout.shape == std::vector<int64_t>{2, 3});
    CHECK(layout.data_bytes == 6 * c.size);
    CHECK(layout.data_offset + layout.data_bytes == file.size());
  }
  for (auto [shape, dims] : {std::pair<std::string, std::vector<int64_t>>{"()", {}}, {"(5,)", {5}},
                             {"(2, 3,)", {2, 3}}, {"(0, 7)", {0, 7}}, {"(1,2,3)", {1, 2, 3}}}) {
    CAPTURE(shape);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    auto file = npy_bytes(dict("<f4", shape), static_cast<size_t>(4 * n));
    CHECK(parse_npy_header(file, file.size(), "t.npy").shape == dims);
  }
  // numpy's own spellings: double quotes, keys in another order, format 2.0.
  auto reordered = npy_bytes("{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i8\"}", 24, 2);
  CHECK(parse_npy_header(reordered, reordered.size(), "t.npy").dtype == ejk::DType::i64);
}

TEST_CASE("npy: u1 loads as u8, one byte per element (it overflowed the heap)", "[npy]") {
  TempFile f;
  std::vector<uint8_t> values(64 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i * 7);
  std::vector<int64_t> shape = {64, 3};
  ejk::cli::write_npy(f.path, ejk::DType::u8, shape, values.data(), values.size());
  ejk::Tensor t = ejk::cli::load_npy(f.path);
  CHECK(t.dtype() == ejk::DType::u8);
  CHECK(t.nbytes() == values.size());
  CHECK(std::memcmp(t.data(), values.data(), values.size()) == 0);
}

TEST_CASE("npy: a shape whose size overflows int64 is refused before any allocation", "[npy]") {
  // The shape: 2147549185 x 2147418113 x 1 x 64 wraps to a tiny buffer.
  auto file = npy_bytes(dict("<f4", "(2147549185, 2147418113, 1, 64)"), 256);
  CHECK_THAT(problem(file), ContainsSubstring("t.npy: shape: size overflows"));
  CHECK_THAT(problem(npy_bytes(dict("<f8", "(9223372036854775807, 2)"), 0)), ContainsSubstring("overflows"));
  CHECK_THAT(problem(npy_bytes(dict("<f4", "(137438953472,)"), 0)),
             ContainsSubstring("t.npy: array of 549755813888 bytes is larger than the 64 GiB limit"));
  CHECK_THAT(problem(npy_bytes(dict("<f4", "(100,)"), 399)),
             ContainsSubstring("needs 400 bytes of data, the file holds 399"));
  CHECK_THAT(problem(npy_bytes(dict("<f4", "(100,)"), 401)), ContainsSubstring("the file holds 401"));
}

TEST_CASE("npy: malformed headers are errors naming the file, never 'internal error: stoll'", "[npy]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dict("<f4", "(2, x)"), "expected a dimension"},
      {dict("<f4", "(2,,3)"), "expected a dimension"},
      {dict("<f4", "(2 3)"), "expected ')'"},
      {dict("<f4", "(-1,)"), "expected a dimension"},
      {dict("<f4", "(0100,)"), "expected a dimension"},
      {dict("<f4", "(1e3,)"), "expected ')'"},
      {dict("<f4", "(99999999999999999999,)"), "expected a dimension"},
      {dict("<f4", "(5)"), "'(n,)'"},
      {dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)"), "more than 8 dimensions"},
      {dict("<f4", "[2, 3]"), "expected '('"},
      {dict(">f4", "(1,)"), "dtype '>f4' is not supported"},
      {dict("<c8", "(1,)"), "dtype '<c8' is not supported"},
      {dict("|b1", "(1,)"), "not supported"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "fortran_order True"},
      {"{'descr': '<f4', 'shape': (1,), }", "expected the keys"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "repeated key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "unexpected or repeated key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", "expected True or False"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", "expected '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing", "text after the closing"},
      {"{'descr': '<f4' 'fortran_order': False}", "expected '}'"},
      {"{'descr': '<f4", "unterminated string"},
      {"", "expected '{'"},
      {"{descr: '<f4'}", "expected a quoted string"},
  };
  for (const auto& [text, why] : cases) {
    CAPTURE(text);
    std::string p = problem(npy_bytes(text, 4));
    CHECK_THAT(p, ContainsSubstring("t.npy") && ContainsSubstring(why));
  }
}

TEST_CASE("npy: preambles and truncations", "[npy]") {
  auto good = npy_bytes(dict("<f4", "(3,)"), 12);
  for (size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_THAT(problem(cut), ContainsSubstring("t.npy"));
  }
  auto v4 = good;
  v4[6] = 4;
  CHECK_THAT(problem(v4), ContainsSubstring("format version 4.0"));
  auto long_header = good;
  long_header[8] = 0xff;
  long_header[9] = 0xff;
  CHECK_THAT(problem(long_header), ContainsSubstring("truncated or larger"));
  CHECK_THAT(problem({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0, 0}), ContainsSubstring("not a .npy file"));
}

TEST_CASE("npy: files that are not regular files are refused without blocking", "[npy]") {
  TempFile f;
  REQUIRE(::mkfifo(f.path.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(ejk::cli::load_npy(f.path), ContainsSubstring("is a FIFO; expected a regular file"));
  CHECK_THROWS_WITH(ejk::cli::load_npy(f.path.parent_path() / "ejk-no-such-file.npy"),
                    ContainsSubstring("ejk-no-such-file.npy"));
}

TEST_CASE("npy: save and load round-trip f32, f64, i32, i64 and f16", "[npy]") {
  TempFile f;
  for (ejk::DType dt : {ejk::DType::f32, ejk::DType::f64, ejk::DType::i32, ejk::DType::i64, ejk::DType::f16}) {
    ejk::Tensor t = ejk::Tensor::empty(std::vector<int64_t>{3, 5}, dt);
    for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.data())[i] = static_cast<uint8_t>(i * 13);
    ejk::cli::save_npy(f.path, t);
    ejk::Tensor back = ejk::cli::load_npy(f.path);
    CHECK(back.dtype() == dt);
    CHECK(back.nbytes() == t.nbytes());
    CHECK(std::memcmp(back.data(), t.data(), t.nbytes()) == 0);
  }
  ejk::Tensor bf = ejk::Tensor::empty(std::vector<int64_t>{2}, ejk::DType::bf16);
  CHECK_THROWS_WITH(ejk::cli::save_npy(f.path, bf), ContainsSubstring("cannot be stored"));
}
