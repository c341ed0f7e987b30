// sluice: one binary, one subcommand per job (see DESIGN.md).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "common/utf8.h"
#include "kernels/kernel_path.h"

namespace sluice::cli {

int fail(const std::string& message) {
  std::cerr << "sluice: error: " << terminal_safe(message, /*keep_lines=*/true) << std::endl;
  return kExitError;
}

int fail_usage(const std::string& message) {
  std::cerr << "sluice: error: " << terminal_safe(message, /*keep_lines=*/true) << " (see --help)" << std::endl;
  return kExitUsage;
}

int fail_config(const Status& status) {
  return status.code() == StatusCode::kInvalid ? fail_usage(status.message()) : fail(status.message());
}

CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size()) {
          return "must be an integer in 0..18446744073709551615, got '" + s + "'";
        }
        return {};
      },
      "0..2^64-1");
}

namespace {

CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& s) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || !(allow_zero ? v >= 0 : v > 0) || !std::isfinite(v)) {
          return std::string(allow_zero ? "must be a number >= 0" : "must be a number > 0") + ", got '" + s + "'";
        }
        return {};
      },
      allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

CLI::Validator non_empty(const std::string& name, const std::string& what) {
  const std::string message = what.empty() ? "must not be empty" : what + " must not be empty";
  return CLI::Validator([message](std::string& v) { return v.empty() ? message : std::string(); }, name);
}

CLI::Validator required_key() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        return s.empty() ? "an empty key would turn authentication off: give a key, or leave the flag out" : "";
      },
      "KEY");
}

std::string empty_key_variable(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v != '\0') return {};
  return fmt::format("{} is set but empty, and an empty key would turn authentication off: give a key, or unset it",
                     name);
}

namespace {

// Whether `path` can be opened for writing as it will be (a folder root may write to, yet /proc
// or a read-only mount refuses): an existing file is opened for appending and left as it is; a
// new one is made and removed again, only while it is still the empty file made here.
std::string check_writable(const std::string& shown, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool existed = fs::exists(path, ec);
  if (existed && !fs::is_regular_file(path, ec)) return {};  // a pipe or a device: opened when written
  const int fd = existed ? ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC)
                         : ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (!existed && errno == EEXIST) return {};  // made meanwhile by another: opened when written
    return fmt::format("'{}' cannot be written: {}", shown, std::error_code(errno, std::generic_category()).message());
  }
  struct stat made{}, now{};
  const bool ours = !existed && ::fstat(fd, &made) == 0 && ::lstat(path.c_str(), &now) == 0 &&
                    made.st_dev == now.st_dev && made.st_ino == now.st_ino && now.st_size == 0;
  if (ours) ::unlink(path.c_str());
  ::close(fd);
  return {};
}

}  // namespace

CLI::Validator output_file() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        namespace fs = std::filesystem;
        if (s.empty()) return "an empty file name";
        std::error_code ec;
        if (fs::is_directory(s, ec)) return fmt::format("'{}' is a folder, not a file", s);
        // A symbolic link is written through: its target's folder is the one that must exist.
        fs::path link = s;
        for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(link, ec)); ++hops) {
          const fs::path to = fs::read_symlink(link, ec);
          link = to.is_absolute() ? to : link.parent_path() / to;
        }
        const std::string target = link.string();
        const fs::path dir = fs::path(target).parent_path();
        const std::string folder = dir.empty() ? "." : dir.string();
        if (!fs::is_directory(folder, ec)) return fmt::format("'{}': the folder '{}' does not exist", s, folder);
        if (::access(folder.c_str(), W_OK) != 0) {
          return fmt::format("'{}': the folder '{}' cannot be written: {}", s, folder,
                             std::error_code(errno, std::generic_category()).message());
        }
        return check_writable(s, target);
      },
      "FILE");
}

CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < lo || v > hi) {
          return fmt::format("must be a number in {}..{}, got '{}'", lo, hi, s);
        }
        return {};
      },
      fmt::format("NUMBER in {}..{}", lo, hi));
}

CLI::Validator positive_number() { return number_check(false); }
CLI::Validator non_negative_number() { return number_check(true); }

int finish_stdout() {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) return fail("cannot write to standard output");
  return kExitOk;
}

std::function<void(uint64_t, uint64_t)> terminal_progress(const std::string& what, bool weights) {
  if (!isatty(STDERR_FILENO)) return {};
  return [what, weights](uint64_t done, uint64_t total) {
    const double unit = weights ? 1e6 : 1024.0 * 1024.0;
    std::fprintf(stderr, "\r%s: %3d%% (%.0f / %.0f %s)", what.c_str(),
                 total ? static_cast<int>(100 * done / total) : 100, done / unit, total / unit,
                 weights ? "M weights" : "MiB");
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
  // Writing to a closed pipe (sluice generate | head -1) is a write error reported with exit
  // status 1, not a death by SIGPIPE (141).
  std::signal(SIGPIPE, SIG_IGN);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show the help of every command");
  app.set_version_flag("--version", "sluice " SLUICE_VERSION);
  const std::pair<const char*, CommandFn> commands[] = {
      {"serve", add_serve_command(app)},
      {"generate", add_generate_command(app)},
      {"tokenize", add_tokenize_command(app)},
      {"model", add_model_command(app)},
      {"bench", add_bench_command(app)},
      {"pair", add_pair_command(app)},
      {"route", add_route_command(app)},
      {"eval", add_eval_command(app)},
  };
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto& [name, runner] : commands) known = known || std::string(argv[1]) == name;
    if (!known) {
      std::cerr << "sluice: error: unknown command '" << argv[1] << "' (commands: serve, generate, tokenize, model, bench, pair, route, eval; see sluice --help)\n";
      return kExitUsage;
    }
    // The same for a command's own commands (`sluice model quantise`, `sluice route rollout
    // statuz`), at every level that has some: the word right after a command names one.
    CLI::App* cmd = app.get_subcommand(argv[1]);
    std::string path = argv[1];
    for (int i = 2; i < argc && argv[i][0] != '-'; ++i) {
      const std::vector<CLI::App*> subs = cmd->get_subcommands({});
      if (subs.empty()) break;
      std::string names;
      CLI::App* next = nullptr;
      for (CLI::App* sub : subs) {
        names += (names.empty() ? "" : ", ") + sub->get_name();
        if (sub->get_name() == argv[i]) next = sub;
      }
      if (next == nullptr) {
        std::cerr << "sluice: error: unknown " << path << " command '" << argv[i] << "' (" << path
                  << " commands: " << names << "; see sluice " << path << " --help)\n";
        return kExitUsage;
      }
      cmd = next;
      path += " " + next->get_name();
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ArgumentMismatch& e) {
    // CLI11's words for a flag given twice ("--temp: At Most 1 required but received 2").
    const std::string what = e.what();
    const std::string_view marker = ": At Most 1 required but received ";
    if (const size_t at = what.find(marker); at != std::string::npos) {
      return fail_usage(
          fmt::format("{} is given {} times: give it once", what.substr(0, at), what.substr(at + marker.size())));
    }
    app.exit(e);
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    if (code != 0) return kExitUsage;
    // --help, --version: their text must have reached stdout too (a full disk is exit 1).
    std::cout.flush();
    if (!std::cout) return fail("cannot write to standard output");
    return finish_stdout();
  }
  // The commands that run models: a kernel path forced by the environment that is unknown, or
  // that this machine cannot run, is refused before any work (not after a model is written).
  for (const char* name : {"serve", "generate", "model", "pair"}) {
    if (!app.got_subcommand(name)) continue;
    if (sluice::Status s = sluice::kernels::check_kernel_environment(); !s) {
      std::cerr << "sluice: error: " << s.message() << std::endl;
      return kExitUsage;
    }
  }
  // Library code reports failures as values; anything thrown here (out of memory, no threads
  // left) still ends with a message rather than an abort.
  try {
    for (const auto& [name, runner] : commands) {
      if (app.got_subcommand(name)) return runner();
    }
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  }
  return kExitUsage;
}
