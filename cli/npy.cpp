#include "npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "ejk/core/checked.h"
#include "ejk/core/error.h"

namespace ejk::cli {
namespace {

constexpr size_t kPreambleV1 = 10, kPreambleV2 = 12;  // magic, version, header length
constexpr uint64_t kMaxHeaderBytes = 65536;
constexpr size_t kMaxRank = 8;

struct Descr {
  std::string_view text;
  DType dtype;
  uint64_t size;
};
constexpr std::array<Descr, 7> kDescrs = {{{"<f4", DType::f32, 4}, {"<f8", DType::f64, 8},
                                           {"<i4", DType::i32, 4}, {"<i8", DType::i64, 8},
                                           {"<f2", DType::f16, 2}, {"|u1", DType::u8, 1},
                                           {"<u1", DType::u8, 1}}};

const Descr* find_descr(std::string_view text) {
  for (const Descr& d : kDescrs)
    if (d.text == text) return &d;
  return nullptr;
}

const Descr* find_descr(DType dtype) {
  for (const Descr& d : kDescrs)
    if (d.dtype == dtype) return &d;
  return nullptr;
}

// The header dict, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }": a
// Python literal, read by a small recursive-free scanner (no regex, no number parsing that
// accepts more than digits).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : s_(text), name_(name) {}

  NpyLayout parse() {
    expect('{');
    std::optional<std::string_view> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    while (!accept('}')) {
      std::string_view key = quoted();
      expect(':');
      if (key == "descr" && !descr) descr = quoted();
      else if (key == "fortran_order" && !fortran) fortran = boolean();
      else if (key == "shape" && !shape) shape = tuple();
      else fail(fmt::format("unexpected or repeated key '{}'", key));
      if (!accept(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (i_ != s_.size()) fail("text after the closing '}'");
    if (!descr || !fortran || !shape) fail("expected the keys 'descr', 'fortran_order' and 'shape'");
    if (*fortran) fail("fortran_order True is not supported (expected C order)");
    const Descr* d = find_descr(*descr);
    if (!d)
      throw InvalidArgument(fmt::format("{}: dtype '{}' is not supported; expected <f4, <f8, <i4, "
                                        "<i8, <f2 or |u1", name_, *descr));
    NpyLayout out;
    out.dtype = d->dtype;
    out.shape = std::move(*shape);
    out.data_bytes = static_cast<uint64_t>(
        checked_nbytes(out.shape, static_cast<int64_t>(d->size), fmt::format("{}: shape", name_)));
    return out;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw InvalidArgument(fmt::format("{}: bad .npy header at character {}: {}", name_, i_ + 1, what));
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n')) ++i_;
  }
  bool accept(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(fmt::format("expected '{}'", c));
  }
  bool word(std::string_view w) {
    skip_space();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::string_view quoted() {
    skip_space();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail("expected a quoted string");
    const char quote = s_[i_++];
    const size_t end = s_.find(quote, i_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string_view text = s_.substr(i_, end - i_);
    i_ = end + 1;
    return text;
  }
  bool boolean() {
    if (word("True")) return true;
    if (word("False")) return false;
    fail("expected True or False");
  }
  int64_t dim() {
    skip_space();
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    std::optional<int64_t> v = parse_decimal(s_.substr(start, i_ - start), 0, INT64_MAX);
    if (!v) fail(fmt::format("expected a dimension (a non-negative decimal integer), got '{}'",
                             s_.substr(start, std::max<size_t>(i_ - start, 1))));
    return *v;
  }
  // "()", "(n,)", "(n, m)" or "(n, m,)".
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    bool trailing_comma = false;
    while (!accept(')')) {
      if (dims.size() == kMaxRank) fail(fmt::format("more than {} dimensions", kMaxRank));
      dims.push_back(dim());
      trailing_comma = accept(',');
      if (!trailing_comma) {
        expect(')');
        break;
      }
    }
    if (dims.size() == 1 && !trailing_comma) fail("a one-dimensional shape is written '(n,)'");
    return dims;
  }

  std::string_view s_, name_;
  size_t i_ = 0;
};

uint64_t little_endian(std::span<const uint8_t> b) {
  uint64_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return v;
}

}  // namespace

NpyLayout parse_npy_header(std::span<const uint8_t> head, uint64_t file_size, std::string_view name) {
  if (head.size() < kPreambleV1 || std::memcmp(head.data(), "\x93NUMPY", 6) != 0)
    throw InvalidArgument(fmt::format("{}: not a .npy file (no \\x93NUMPY magic)", name));
  const uint8_t major = head[6], minor = head[7];
  if (major < 1 || major > 3 || minor != 0)
    throw InvalidArgument(fmt::format("{}: .npy format version {}.{} is not supported (1.0-3.0)",
                                      name, major, minor));
  const size_t preamble = major == 1 ? kPreambleV1 : kPreambleV2;
  if (head.size() < preamble) throw InvalidArgument(fmt::format("{}: truncated .npy preamble", name));
  const uint64_t header_bytes = little_endian(head.subspan(8, preamble - 8));
  if (header_bytes > kMaxHeaderBytes || header_bytes > head.size() - preamble)
    throw InvalidArgument(fmt::format("{}: .npy header of {} bytes is truncated or larger than {}",
                                      name, header_bytes, kMaxHeaderBytes));
  std::string_view text(reinterpret_cast<const char*>(head.data() + preamble), header_bytes);
  NpyLayout layout = HeaderParser(text, name).parse();
  layout.data_offset = preamble + header_bytes;
  if (layout.data_bytes > kMaxNpyBytes)
    throw InvalidArgument(fmt::format("{}: array of {} bytes is larger than the {} GiB limit", name,
                                      layout.data_bytes, kMaxNpyBytes >> 30));
  if (file_size < layout.data_offset || file_size - layout.data_offset != layout.data_bytes)
    throw InvalidArgument(fmt::format("{}: the shape needs {} bytes of data, the file holds {}",
                                      name, layout.data_bytes,
                                      file_size > layout.data_offset ? file_size - layout.data_offset : 0));
  return layout;
}

NpyFile::NpyFile(const std::filesystem::path& path) : file_(path, "--load") {
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(file_.size(), kPreambleV2 + kMaxHeaderBytes)));
  file_.read_at(0, head.data(), head.size());
  layout_ = parse_npy_header(head, file_.size(), path.string());
}

void NpyFile::read_data(void* dst) const { file_.read_at(layout_.data_offset, dst, layout_.data_bytes); }

void write_npy(WriteFile& out, DType dtype, std::span<const int64_t> shape, const void* data, size_t bytes) {
  const Descr* descr = find_descr(dtype);
  if (!descr)
    throw InvalidArgument("save_npy: this dtype cannot be stored (f32, f64, i32, i64, f16 or u8)");
  std::string dims;
  for (int64_t d : shape) dims += fmt::format("{}, ", d);
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(n,)" keeps its comma
  if (shape.size() == 1) dims.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   descr->text, dims);
  // Pad so magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  size_t total = kPreambleV1 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lb, 2);
  out.write(header.data(), header.size());
  out.write(data, bytes);
}

void write_npy(const std::filesystem::path& path, DType dtype, std::span<const int64_t> shape,
               const void* data, size_t bytes) {
  if (!find_descr(dtype))  // refused before a file is made
    throw InvalidArgument("save_npy: this dtype cannot be stored (f32, f64, i32, i64, f16 or u8)");
  WriteFile out(path, "save_npy");
  write_npy(out, dtype, shape, data, bytes);
  out.close();
}

}  // namespace ejk::cli
