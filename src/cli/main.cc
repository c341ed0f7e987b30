// sluice: one binary, one subcommand per job (see DESIGN.md).
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "cli/commands.h"

namespace sluice::cli {

int fail(const std::string& message) {
  std::cerr << "sluice: error: " << message << std::endl;
  return kExitError;
}

std::function<void(uint64_t, uint64_t)> terminal_progress(const std::string& what) {
  if (!isatty(STDERR_FILENO)) return {};
  return [what](uint64_t done, uint64_t total) {
    const double mib = 1024.0 * 1024.0;
    std::fprintf(stderr, "\r%s: %3d%% (%.0f / %.0f MiB)", what.c_str(),
                 total ? static_cast<int>(100 * done / total) : 100, done / mib, total / mib);
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace sluice::cli

int main(int argc, char** argv) {
  using namespace sluice::cli;
  CLI::App app{"sluice: an LLM serving stack. Runs GGUF models (llama, qwen2, qwen3) on the CPU.\n"
               "Use `sluice COMMAND --help` for the options of each command.",
               "sluice"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  Runner generate = add_generate_command(app);
  Runner tokenize = add_tokenize_command(app);
  Runner model = add_model_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (app.got_subcommand("generate")) return generate();
  if (app.got_subcommand("tokenize")) return tokenize();
  if (app.got_subcommand("model")) return model();
  return kExitUsage;
}
