// What the end-to-end tests of the sluice binary share (cli_test.cc, cli_model_test.cc,
// cli_generate_test.cc): running it as a user would, and the shared test models.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"

namespace sluice::cli_testing {

struct Output {
  int exit_code;
  std::string out;  // stdout (stderr too when asked)
};

// Runs sluice with `args`; captures stdout (and stderr when asked). With stdout_to, stdout goes
// to that file instead and only stderr is captured.
inline Output run(const std::string& args, bool with_stderr = false, const std::string& stdout_to = "") {
  const std::string redirect = !stdout_to.empty() ? " 2>&1 >" + stdout_to : with_stderr ? " 2>&1" : " 2>/dev/null";
  const std::string cmd = sluice::testing::binary_dir() + "/src/cli/sluice " + args + redirect;
  FILE* p = popen(cmd.c_str(), "r");
  Output o{-1, ""};
  if (!p) return o;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  int status = pclose(p);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

// What a shell command line prints on stdout.
inline std::string shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

inline const std::string kShared = sluice::testing::shared_dir();
inline bool have_shared() { return std::filesystem::exists(kShared + "/models/stories260K.gguf"); }

}  // namespace sluice::cli_testing
