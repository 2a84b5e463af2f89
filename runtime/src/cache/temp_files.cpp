#include "cache/temp_files.h"

#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "cache/posix_io.h"

namespace ejk::cache::temps {
namespace fs = std::filesystem;
namespace {

constexpr auto kDeadWriterGrace = std::chrono::seconds(2);
constexpr auto kMaxTempAge = std::chrono::minutes(10);

std::optional<fs::file_time_type::duration> age(const fs::path& path) {
  std::error_code ec;
  auto written = fs::last_write_time(path, ec);
  if (ec) return std::nullopt;
  return fs::file_time_type::clock::now() - written;
}

}  // namespace

bool is_stale(const fs::path& path) {
  std::optional<long> writer = io::temp_file_writer(path.filename().string());
  auto old = age(path);
  if (!writer || !old) return false;
  if (*old > kMaxTempAge) return true;
  return *old > kDeadWriterGrace && !io::process_alive(*writer);
}

std::string describe(const fs::path& path) {
  std::optional<long> writer = io::temp_file_writer(path.filename().string());
  if (!writer) return "not a temp file";
  if (is_stale(path))
    return fmt::format("temp file left by writer pid {} (gone or stale): removed by the next store "
                       "or cache clear", *writer);
  return fmt::format("temp file being written by pid {}", *writer);
}

size_t remove_stale(const fs::path& dir) {
  size_t removed = 0;
  std::string error;
  for (const std::string& name : io::list_directory(dir, error).value_or(std::vector<std::string>{})) {
    fs::path path = dir / name;
    if (io::is_temp_file_name(name) && is_stale(path)) removed += ::unlink(path.c_str()) == 0;
  }
  return removed;
}

}  // namespace ejk::cache::temps
