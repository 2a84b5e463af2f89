#include "files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <system_error>

#include "ejk/core/error.h"

namespace ejk::gen {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(fmt::format("cannot read '{}': no such file or not readable", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool write_if_changed(const fs::path& path, std::string_view content) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && fs::file_size(path, ec) == content.size() &&
      read_file(path) == content)
    return false;
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) throw InvalidArgument(fmt::format("cannot write '{}'", tmp.string()));
  }
  fs::rename(tmp, path);
  return true;
}

std::vector<std::string> list_files(const fs::path& dir, bool recursive) {
  if (!fs::is_directory(dir))
    throw InvalidArgument(fmt::format("'{}' is not a directory", dir.string()));
  std::vector<std::string> out;
  auto consider = [&](const fs::directory_entry& e) {
    const std::string rel = fs::relative(e.path(), dir).generic_string();
    bool hidden = false;
    for (const fs::path& part : fs::path(rel)) hidden = hidden || part.string().front() == '.';
    if (!hidden && e.is_regular_file()) out.push_back(rel);
  };
  if (recursive) {
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
      if (it->is_directory() && it->path().filename().string().front() == '.') {
        it.disable_recursion_pending();
        continue;
      }
      consider(*it);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir)) consider(e);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ejk::gen
