// ejk: run, check, list and cache ejkernel variants from the command line.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "ejk/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"ejk: ejkernel's kernel runner, checker and cache tool"};
  app.require_subcommand(1);
  ejk::cli::add_run_command(app);
  ejk::cli::add_list_command(app);
  ejk::cli::add_cache_command(app);
  ejk::cli::add_compile_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ejk::Error& e) {
    std::cerr << "ejk: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ejk: internal error: " << e.what() << "\n";
    return 3;
  }
  return ejk::cli::exit_code();
}
