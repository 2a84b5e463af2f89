// ejk: run, check, list and cache ejkernel variants from the command line.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <string_view>

#include "commands.h"
#include "ejk/core/error.h"
#include "ejk/op.h"

int main(int argc, char** argv) {
  CLI::App app{"ejk: ejkernel's kernel runner, checker and cache tool"};
  app.require_subcommand(1);
  ejk::cli::add_run_command(app);
  ejk::cli::add_list_command(app);
  ejk::cli::add_cache_command(app);
  ejk::cli::add_compile_command(app);
  ejk::cli::add_bundle_command(app);
  ejk::cli::add_tune_command(app);
  // An option given an empty value ("--window ''") is a mistake, not "not given".
  for (int i = 1; i + 1 < argc; ++i)
    if (argv[i][0] == '-' && argv[i][1] == '-' && argv[i + 1][0] == '\0') {
      std::cerr << fmt::format("ejk: error: {}: expected a value, got ''\n", argv[i]);
      return 2;
    }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // `ejk run OP` with an op this build lacks: say so, with the ops it has.
    if (e.get_exit_code() != 0 && argc >= 3 && argv[2][0] != '-' &&
        (std::string_view(argv[1]) == "run" || std::string_view(argv[1]) == "compile" || std::string_view(argv[1]) == "tune")) {
      const auto names = ejk::op_names();
      if (std::find(names.begin(), names.end(), argv[2]) == names.end()) {
        std::cerr << fmt::format("ejk: error: {}: unknown op '{}' (ops: {})\n", argv[1], argv[2], fmt::join(names, ", "));
        return 2;
      }
    }
    // A flag given a value ("--causal=2"): name the flag and say what it takes, instead of
    // CLI11's "causal was given a disallowed flag override".
    if (const std::string_view what = e.what(); what.find("disallowed flag override") != std::string_view::npos)
      for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        const size_t eq = arg.find('=');
        if (arg.substr(0, 2) != "--" || eq == std::string_view::npos) continue;
        const std::string_view name = arg.substr(2, eq - 2);
        if (what.substr(0, name.size()) == name && what.substr(name.size(), 1) == " ") {
          std::cerr << fmt::format("ejk: error: --{}: a flag takes no value, got '{}' (give --{} alone to turn it on)\n",
                                   name, arg.substr(eq + 1), name);
          return 2;
        }
      }
    // Usage errors exit 2 like every other error (help and version exit 0).
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const ejk::Error& e) {
    std::cerr << "ejk: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ejk: internal error: " << e.what() << "\n";
    return 3;
  }
  return ejk::cli::exit_code();
}
