// Minimal .npy (format 1.0) reading and writing for the CLI's --save / --load:
// little-endian f4, f8, i4, i8, C order.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "ejk/tensor.h"

namespace ejk::cli {

// Writes a contiguous CPU tensor of dtype f32, f64, i32 or i64.
void save_npy(const std::filesystem::path& path, const Tensor& t);

// Reads a .npy file into a new CPU tensor; InvalidArgument naming the file on bad content.
Tensor load_npy(const std::filesystem::path& path);

}  // namespace ejk::cli
