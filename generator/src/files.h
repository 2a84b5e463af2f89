// File helpers of the generator: reading, listing and writing only what changed.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ejk::gen {

namespace fs = std::filesystem;

// The whole file, bytes as they are; InvalidArgument naming the path when it cannot be read.
std::string read_file(const fs::path& path);

// Writes `content` to `path` (creating directories) unless the file already holds exactly
// these bytes, so that an unchanged output keeps its mtime and the build does not recompile
// it. Writes to a temporary file and renames, so a reader never sees half a file. Returns
// whether it wrote.
bool write_if_changed(const fs::path& path, std::string_view content);

// Regular files under `dir`, as paths relative to it with '/' separators, sorted. Names that
// begin with '.' (editor swap files, .git) are skipped, files and directories alike.
// InvalidArgument when `dir` is not a directory.
std::vector<std::string> list_files(const fs::path& dir, bool recursive);

}  // namespace ejk::gen
