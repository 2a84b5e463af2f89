#include "npy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <regex>

#include "ejk/core/error.h"

namespace ejk::cli {
namespace {

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    default: return nullptr;
  }
}

DType dtype_of(const std::string& descr, const std::filesystem::path& path) {
  for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64})
    if (descr == descr_of(t)) return t;
  throw InvalidArgument(fmt::format("{}: dtype '{}' not supported, expected <f4, <f8, <i4 or <i8",
                                    path.string(), descr));
}

}  // namespace

void save_npy(const std::filesystem::path& path, const Tensor& t) {
  const char* descr = descr_of(t.dtype());
  if (!descr) throw InvalidArgument(fmt::format("save_npy {}: dtype {} cannot be stored", path.string(), dtype_name(t.dtype())));
  std::string shape = t.shape().size() == 1 ? fmt::format("({},)", t.shape()[0])
                                            : fmt::format("({})", fmt::join(t.shape(), ", "));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  // Pad so magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("cannot write {}", path.string()));
  f.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  char lb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (!f) throw Error(fmt::format("write failed: {}", path.string()));
}

Tensor load_npy(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(fmt::format("cannot open {}", path.string()));
  char magic[10];
  f.read(magic, 10);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw InvalidArgument(fmt::format("{}: not a .npy file", path.string()));
  size_t hlen;
  if (magic[6] == 1) {
    hlen = static_cast<uint8_t>(magic[8]) | (static_cast<uint8_t>(magic[9]) << 8);
  } else {
    char more[2];
    f.read(more, 2);
    hlen = static_cast<uint8_t>(magic[8]) | (static_cast<uint8_t>(magic[9]) << 8) |
           (static_cast<uint8_t>(more[0]) << 16) | (static_cast<uint8_t>(more[1]) << 24);
  }
  std::string header(hlen, '\0');
  f.read(header.data(), static_cast<std::streamsize>(hlen));
  std::smatch m;
  static const std::regex descr_re("'descr':\\s*'([^']+)'"), fortran_re("'fortran_order':\\s*(True|False)"),
      shape_re("'shape':\\s*\\(([^)]*)\\)");
  if (!std::regex_search(header, m, descr_re)) throw InvalidArgument(fmt::format("{}: header has no descr", path.string()));
  DType dt = dtype_of(m[1], path);
  if (std::regex_search(header, m, fortran_re) && m[1] == "True")
    throw InvalidArgument(fmt::format("{}: Fortran order is not supported", path.string()));
  if (!std::regex_search(header, m, shape_re)) throw InvalidArgument(fmt::format("{}: header has no shape", path.string()));
  std::vector<int64_t> shape;
  std::string dims = m[1];
  for (size_t pos = 0; pos < dims.size();) {
    size_t comma = dims.find(',', pos);
    std::string tok = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (tok.find_first_not_of(" ") != std::string::npos) shape.push_back(std::stoll(tok));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  Tensor t = Tensor::empty(shape, dt);
  f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
  if (f.gcount() != static_cast<std::streamsize>(t.nbytes()))
    throw InvalidArgument(fmt::format("{}: truncated data ({} of {} bytes)", path.string(), f.gcount(), t.nbytes()));
  return t;
}

}  // namespace ejk::cli
