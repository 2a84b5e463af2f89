// Temp files of cache writers ("<entry>.tmp.<pid>.<16 hex>"). A writer that crashes between
// write and rename leaves one behind; the pid in its name tells a later process whether the
// writer is gone, so such files are removed by the next store or `cache clear` and shown by
// `cache ls`.
#pragma once
#include <filesystem>
#include <string>

namespace ejk::cache::temps {

// Whether a temp file may be removed: its writer is dead (and the file is a few seconds old,
// since a writer in another pid namespace looks dead), or it is older than 10 minutes
// (a recycled pid can make a dead writer look alive).
bool is_stale(const std::filesystem::path& path);

// A line for `cache ls` about the temp file at `path`.
std::string describe(const std::filesystem::path& path);

// Removes the stale temp files in `dir`; returns how many.
size_t remove_stale(const std::filesystem::path& dir);

}  // namespace ejk::cache::temps
