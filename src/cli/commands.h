// Subcommands of the `sluice` binary. Each adds itself to the app and returns a runner that
// is called when the subcommand was chosen; the runner returns the process exit code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace sluice::cli {

using CommandFn = std::function<int()>;

CommandFn add_generate_command(CLI::App& app);
CommandFn add_serve_command(CLI::App& app);
CommandFn add_tokenize_command(CLI::App& app);
CommandFn add_model_command(CLI::App& app);
CommandFn add_bench_command(CLI::App& app);
CommandFn add_pair_command(CLI::App& app);
CommandFn add_route_command(CLI::App& app);
CommandFn add_eval_command(CLI::App& app);
// `route rollout ...` and `route shadow ...` under route's command (cmd_route_admin.cc): the
// returned function runs the one given, if any (its exit code); `router_admin_key`: route's own
// --admin-key, which serves them when they name none.
std::function<std::optional<int>()> add_route_admin_commands(CLI::App& route_cmd,
                                                             std::function<std::string()> router_admin_key);

// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;      // the work failed (bad file, bad input)
inline constexpr int kExitUsage = 2;      // bad command line

// Prints "sluice: error: MESSAGE" to stderr and returns kExitError.
int fail(const std::string& message);
// The same for a bad command line (a flag's value out of range, flags that contradict each
// other), checked after parsing: returns kExitUsage, as a parse error does.
int fail_usage(const std::string& message);
// An engine configuration error: kInvalid comes from the flags (kExitUsage), anything else
// (memory) is kExitError.
int fail_config(const Status& status);

// For a --seed option: an integer in 0..2^64-1, written as one (CLI11 alone would wrap -1 and
// saturate 1e30 without a word).
CLI::Validator seed_validator();

// A finite number in [lo, hi] (CLI::Range lets "nan" through: every comparison with it is false).
CLI::Validator number_in(double lo, double hi);
// A number > 0 (or >= 0), said so when it is not (CLI11's own checks print the range up to
// DBL_MAX written out in full).
CLI::Validator positive_number();
CLI::Validator non_negative_number();

// A value that must not be empty (a stop string, a prompt, a name): "must not be empty", or
// "WHAT must not be empty" with `what`; `name` is the value's name in --help.
CLI::Validator non_empty(const std::string& name, const std::string& what = "");

// A key a server requires (--api-key, --admin-key): an empty one given on the command line
// (`--api-key "$KEY"` with KEY unset) is an error, not a server without authentication.
CLI::Validator required_key();
// The same for a key's environment variable set to nothing (`-e SLUICE_API_KEY=$KEY` with KEY
// unset): the error message, or "" where the variable is unset or holds a key.
std::string empty_key_variable(const char* name);

// A report file a command writes at its end (--json, --svg): checked when the flags are read,
// so minutes of measuring are not lost to a typo — a name, not a folder, in a folder that
// exists and can be written.
CLI::Validator output_file();
// Whether two paths name one file, however spelt (relative, through a symbolic or hard link);
// either may not exist yet. False when either is empty.
bool same_file(const std::string& a, const std::string& b);
// Whether two existing files hold the same bytes (a copy of a model under another name): sizes
// first, then the contents up to the first difference. False when either cannot be read.
bool same_bytes(const std::string& a, const std::string& b);

// Flushes stdout; an error (a full disk, a closed descriptor) is reported and gives kExitError.
int finish_stdout();

// A prompt of a --prompts file, with its line number (1-based) so that results name it.
struct FilePrompt {
  int line = 0;
  std::string text;
};

// Prompts of a --prompts file: one per line; a line starting with '"' is a JSON string (for
// prompts with newlines). Empty lines are skipped (results then name the line, not an index).
Result<std::vector<FilePrompt>> read_prompts(const std::string& path);

// A progress callback that redraws one line on stderr when it is a terminal, else does nothing.
// It counts bytes (shown in MiB), or with `weights` the weights done (shown in millions).
std::function<void(uint64_t, uint64_t)> terminal_progress(const std::string& what, bool weights = false);

}  // namespace sluice::cli
