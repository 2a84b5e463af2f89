// .npy files (format 1.0-3.0) for the CLI's --save / --load: little-endian f4, f8, i4, i8,
// f2 and u1, C order. The reader is strict: the header must be exactly the dict numpy writes
// (descr, fortran_order, shape), every dim a plain decimal, the array's size computed without
// overflow and equal to the bytes the file holds, and below a limit; anything else is an
// ejk::InvalidArgument naming the file.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ejk/tensor.h"
#include "files.h"

namespace ejk::cli {

// Largest array a .npy file may hold (bytes).
inline constexpr uint64_t kMaxNpyBytes = uint64_t{64} << 30;

struct NpyLayout {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // where the array starts in the file
  uint64_t data_bytes = 0;   // numel x element size
};

// Checks the start of a .npy file of `file_size` bytes; `head` holds at least the preamble and
// header (the whole file is fine). `name` is what errors call the file.
NpyLayout parse_npy_header(std::span<const uint8_t> head, uint64_t file_size, std::string_view name);

// An open .npy file (a regular file, not followed through a symlink) whose header has been
// checked; the data is read only when asked, so a caller can validate the layout first.
class NpyFile {
 public:
  explicit NpyFile(const std::filesystem::path& path);
  const NpyLayout& layout() const { return layout_; }
  // Reads the whole array into `dst` (layout().data_bytes bytes).
  void read_data(void* dst) const;

 private:
  ReadFile file_;
  NpyLayout layout_;
};

// Writes `bytes` of a C-order array of `dtype` (f32, f64, i32, i64, f16 or u8) to `out`.
void write_npy(WriteFile& out, DType dtype, std::span<const int64_t> shape, const void* data, size_t bytes);
// The same to a new file or a regular file of this user at `path`.
void write_npy(const std::filesystem::path& path, DType dtype, std::span<const int64_t> shape,
               const void* data, size_t bytes);

// Writes a contiguous CPU tensor.
inline void save_npy(const std::filesystem::path& path, const Tensor& t) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  write_npy(path, t.dtype(), shape, t.data(), t.nbytes());
}
inline void save_npy(WriteFile& out, const Tensor& t) {
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  write_npy(out, t.dtype(), shape, t.data(), t.nbytes());
}

// Reads a .npy file into a new CPU tensor of the file's dtype.
inline Tensor load_npy(const std::filesystem::path& path) {
  NpyFile file(path);
  Tensor t = Tensor::empty(file.layout().shape, file.layout().dtype);
  file.read_data(t.data());
  return t;
}

}  // namespace ejk::cli
