// `sluice bench` as a user runs it: the binary against the fake server, its files, exit codes.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/fake_openai_server.h"
#include "common/test_paths.h"

namespace sluice::bench {
namespace {

using testing::FakeBehaviour;
using testing::FakeOpenAi;
namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("sluice_bench_cli_{}_{}", getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `sluice bench ARGS` with stdout and stderr in files; returns the exit code.
  int bench(const std::string& args) {
    const std::string command = fmt::format("{}/src/cli/sluice bench --no-progress {} >{} 2>{}", sluice::testing::binary_dir(),
                                            args, (dir_ / "out").string(), (dir_ / "err").string());
    const int status = std::system(command.c_str());
    out_ = slurp(dir_ / "out");
    err_ = slurp(dir_ / "err");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  fs::path dir_;
  std::string out_, err_;
};

TEST_F(BenchCli, PrintsTheTableAndWritesJsonAndSvg) {
  FakeOpenAi server;
  const fs::path json = dir_ / "run.json", svg = dir_ / "run.svg";
  ASSERT_EQ(bench(fmt::format("--url {} -n 6 -c 2 --prompt-tokens 8 --output-tokens 4 --token-range 10:20 --json {} "
                              "--svg {}",
                              server.url(), json.string(), svg.string())),
            0)
      << out_ << err_;
  EXPECT_NE(out_.find("6 sent, 6 ok, 0 failed"), std::string::npos) << out_;
  EXPECT_NE(out_.find("model fake-model"), std::string::npos) << out_;
  EXPECT_NE(out_.find("25.0% of prompt tokens"), std::string::npos) << out_;  // 2 of 8 cached
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["summary"]["num_ok"], 6);
  EXPECT_EQ(j["summary"]["output_tokens"], 24);
  EXPECT_EQ(j["config"]["concurrency"], 2);
  EXPECT_EQ(j["config"]["token_range"], nlohmann::json({10, 20}));
  EXPECT_EQ(j["requests"].size(), 6u);
  const std::string chart = slurp(svg);
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  EXPECT_NE(chart.find("</svg>"), std::string::npos);
}

TEST_F(BenchCli, ChatWorkloadUsesTheChatApi) {
  FakeOpenAi server;
  ASSERT_EQ(bench(fmt::format("--url {}/v1 --workload chat --sessions 2 --turns 2 --prompt-tokens 3 --output-tokens 2 "
                              "-m named",
                              server.url())),
            0)
      << out_ << err_;
  EXPECT_NE(out_.find("4 sent, 4 ok"), std::string::npos) << out_;
  for (const auto& b : server.bodies()) {
    EXPECT_EQ(b["model"], "named");
    EXPECT_TRUE(b.contains("messages"));
  }
}

TEST_F(BenchCli, EveryRequestFailingExitsNonZeroWithTheFirstError) {
  FakeOpenAi server(FakeBehaviour{.fail_all_with = 500});
  EXPECT_EQ(bench(fmt::format("--url {} -n 3 -m m", server.url())), 1);
  EXPECT_NE(err_.find("every request failed"), std::string::npos) << err_;
  EXPECT_NE(err_.find("HTTP 500"), std::string::npos) << err_;
  EXPECT_NE(out_.find("http_500"), std::string::npos) << out_;  // the table is printed all the same
}

// A server that refuses the random prompts' token ids (a small vocabulary): the error says which
// flag moves them.
TEST_F(BenchCli, PromptIdsPastTheVocabularyNameTheFlag) {
  FakeOpenAi server(FakeBehaviour{.fail_all_with = 400,
                                  .fail_message = "'prompt' token 3000 (at index 0) is outside the vocabulary (0..511)"});
  EXPECT_EQ(bench(fmt::format("--url {} -n 2 -m m", server.url())), 1);
  EXPECT_NE(err_.find("(the random prompts take token ids from --token-range 100:4000: give a range inside the "
                      "model's vocabulary)"),
            std::string::npos)
      << err_;
}

// Ctrl-C stops the run with a report of what ended and its files written, exit 130; the
// requests in flight are cancelled.
TEST_F(BenchCli, AnInterruptedRunStillReports) {
  // Stopped in the measured phase (its two requests in flight), and in the warmup (the measured
  // phase then never starts: a report of nothing).
  for (const int warmup : {0, 2}) {
    SCOPED_TRACE(fmt::format("warmup {}", warmup));
    FakeOpenAi server(FakeBehaviour{.hang = true});
    const fs::path json = dir_ / "int.json";
    // In the background, its pid and then its exit status in files; the signal goes once both
    // requests have reached the server (so the run is under way, whatever the machine's speed).
    const fs::path pid = dir_ / "pid", rc = dir_ / "rc";
    fs::remove(pid), fs::remove(rc), fs::remove(json);
    const std::string command = fmt::format(
        "sh -c '{}/src/cli/sluice bench --no-progress --url {} -n 100 -c 2 --warmup {} -m m --timeout 60 --json {} "
        ">{} 2>{} & echo $! >{}.tmp; mv {}.tmp {}; wait $!; echo $? >{}.tmp; mv {}.tmp {}' &",
        sluice::testing::binary_dir(), server.url(), warmup, json.string(), (dir_ / "out").string(),
        (dir_ / "err").string(), pid.string(), pid.string(), pid.string(), rc.string(), rc.string(), rc.string());
    ASSERT_EQ(std::system(command.c_str()), 0);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((server.bodies().size() < 2 || !fs::exists(pid)) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(fs::exists(pid));
    const pid_t bench_pid = std::stoi(slurp(pid));
    // Whatever happens below, the background run does not outlive the test.
    struct Reaper {
      pid_t pid;
      ~Reaper() { ::kill(pid, SIGKILL); }
    } reaper{bench_pid};
    ASSERT_EQ(server.bodies().size(), 2u);
    ::kill(bench_pid, SIGINT);
    while (!fs::exists(rc) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    out_ = slurp(dir_ / "out");
    err_ = slurp(dir_ / "err");
    const size_t measured = warmup > 0 ? 0 : 2;
    EXPECT_EQ(slurp(rc), "130\n") << out_ << err_;
    EXPECT_NE(err_.find(fmt::format("sluice bench: interrupted: the report covers the {} measured requests sent",
                                    measured)),
              std::string::npos)
        << err_;
    const auto j = nlohmann::json::parse(slurp(json));
    EXPECT_EQ(j["interrupted"], true);
    EXPECT_EQ(j["requests"].size(), measured);
    if (measured > 0) {
      EXPECT_NE(out_.find("2 sent, 0 ok, 2 failed"), std::string::npos) << out_;
    }
  }
}

TEST_F(BenchCli, BadFlagsAreUsageErrorsThatNameTheFlag) {
  // flags                                   -> what the message names
  const std::pair<const char*, const char*> cases[] = {
      {"--rate 2 -c 3", "--concurrency excludes --rate"},
      {"--max-concurrency 4", "--max-concurrency requires --rate"},
      {"--workload chat --api completions", "--api chat"},
      {"--api chat --prompt-format tokens", "--prompt-format text"},
      {"--prompt-tokens 10:5", "--prompt-tokens"},
      {"--token-range 9", "--token-range"},
      {"--token-range 50:40", "--token-range"},
      {"--extra-body '{oops'", "--extra-body"},
      {"--url ftp://example.com", "not http or https"},
      {"--workload nope", "--workload"},
      // Values past which a time would overflow, and numbers that are none.
      {"--rate 1e-12", "--rate must be between 1e-06 and 1e+06 requests/s"},
      {"--timeout 1e10", "--timeout must be between 0.001 and 1e+07 s"},
      {"--duration 1e12", "--duration must be between 0 and 1e+07 s"},
      {"-n 1 --drain-timeout 1e12", "--drain-timeout must be between 0 and 1e+07 s"},
      {"--temperature nan", "--temperature must be between 0 and 1e+06"},
      {"--temperature -1", "--temperature must be between 0 and 1e+06"},
      {"--temperature 2e6", "--temperature must be between 0 and 1e+06, got 2000000"},
      // Report files are checked before the run, not after it.
      {"--json ''", "--json: an empty file name"},
      {"--json /nonexistent/x.json", "the folder '/nonexistent' does not exist"},
      {"--svg /tmp", "'/tmp' is a folder, not a file"},
      {"--json a.json --svg ./a.json", "--json and --svg name the same file"},
  };
  for (const auto& [flags, word] : cases) {
    EXPECT_EQ(bench(flags), 2) << flags;
    EXPECT_NE(err_.find(word), std::string::npos) << flags << ": " << err_;
  }
}

TEST_F(BenchCli, HelpExplainsEveryFlag) {
  ASSERT_EQ(bench("--help"), 0);
  for (const char* flag :
       {"--url", "--model", "--api-key", "--api", "--workload", "--prompt-tokens", "--output-tokens", "--prompt-format",
        "--token-range", "--prefixes", "--questions", "--prefix-tokens", "--sessions", "--turns", "--seed",
        "--concurrency", "--rate", "--max-concurrency", "--num-requests", "--duration", "--warmup", "--timeout",
        "--drain-timeout", "--no-ignore-eos", "--temperature", "--extra-body", "--json", "--svg", "--no-progress"}) {
    EXPECT_NE(out_.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace sluice::bench
