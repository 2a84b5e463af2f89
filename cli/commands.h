// The CLI's subcommands. Each registers itself on the app and runs from its callback.
#pragma once
#include <CLI/CLI.hpp>

namespace ejk::cli {

void add_run_command(CLI::App& app);      // ejk run flash_attention ...
void add_list_command(CLI::App& app);     // ejk list
void add_cache_command(CLI::App& app);    // ejk cache ls|verify|clear
void add_compile_command(CLI::App& app);  // ejk compile flash_attention ...
void add_bundle_command(CLI::App& app);   // ejk bundle build|ls|verify|extract
void add_tune_command(CLI::App& app);     // ejk tune flash_attention ...; ejk tune ls|clear|export|import

// Exit status chosen by the command that ran (e.g. 1 when --check fails).
int exit_code();
void set_exit_code(int code);

}  // namespace ejk::cli
