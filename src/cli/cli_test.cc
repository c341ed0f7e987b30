// End-to-end tests of the sluice binary: run it as a user would and check what it prints.
// Here: help, kernel paths, flags and bad input of every command, serve and route flags;
// `model`/`tokenize` are in cli_model_test.cc, `generate`/`pair` in cli_generate_test.cc.
#include <unistd.h>

#include <utility>

#include "cli/cli_test_util.h"
#include "kernels/kernel_path.h"

namespace sluice {
namespace {

using namespace cli_testing;

TEST(Cli, HelpListsTheCommands) {
  Output o = run("--help");
  EXPECT_EQ(o.exit_code, 0);
  for (const char* cmd : {"generate", "tokenize", "model"}) EXPECT_NE(o.out.find(cmd), std::string::npos) << cmd;
}

// The kernel path is printed at start; a SLUICE_KERNELS value that names no path is a clear
// error with the usage exit code, not a silent fallback.
TEST(Cli, KernelPathIsPrintedAndAForcedBadOneRefused) {
  const std::string sluice = sluice::testing::binary_dir() + "/src/cli/sluice";
  Output ok = run("generate -p hi -n 1", true);
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("kernels: "), std::string::npos) << ok.out;
  EXPECT_EQ(shell("SLUICE_KERNELS=avx9 " + sluice + " generate -p hi -n 1 >/dev/null 2>&1; echo $?"), "2\n");
  EXPECT_NE(shell("SLUICE_KERNELS=avx9 " + sluice + " generate -p hi -n 1 2>&1 >/dev/null")
                .find("SLUICE_KERNELS=avx9: unknown kernel path 'avx9' (choose avx2, avxvnni, avx512 or amx)"),
            std::string::npos);
}

// On each x86 path (all read repacked weights), generate reports their memory; SLUICE_REPACK=off keeps
// the weights as loaded and says nothing of them; an unknown value is refused.
TEST(Cli, RepackedWeightsAreReported) {
  const std::string sluice = sluice::testing::binary_dir() + "/src/cli/sluice";
  const std::string model = kShared + "/models/quant/llama-d256-s21-Q4_K_M.gguf";
  const std::string cmd = sluice + " generate -m " + model + " -p hi -n 1 2>&1 >/dev/null";
  for (const char* path : {"avx2", "avxvnni", "avx512", "amx"}) {
    if (!sluice::kernels::kernel_path_runs(*sluice::kernels::parse_kernel_path(path))) continue;
    SCOPED_TRACE(path);
    const std::string env = std::string("SLUICE_KERNELS=") + path + " ";
    const std::string on = shell(env + cmd);
    EXPECT_NE(on.find("weights repacked: 29 matrices"), std::string::npos) << on;
    EXPECT_NE(on.find("beside the file's 3.3 MiB"), std::string::npos) << on;
    EXPECT_EQ(shell(env + "SLUICE_REPACK=off " + cmd).find("repacked"), std::string::npos);
  }
  EXPECT_NE(shell("SLUICE_KERNELS=avx2 " + cmd).find("kernels: avx2"), std::string::npos);
  EXPECT_NE(shell("SLUICE_REPACK=maybe " + cmd).find("SLUICE_REPACK=maybe: expected auto, on, lean or off"),
            std::string::npos);
}

// An empty key on the command line (`--api-key "$KEY"`, KEY unset) is refused, not a server
// that asks no key.
TEST(Cli, AnEmptyKeyIsRefused) {
  for (const char* cmd : {"serve --api-key ''", "route --backend http://127.0.0.1:1 --api-key ''",
                          "route --backend http://127.0.0.1:1 --admin-key ''"}) {
    Output o = run(cmd, true);
    EXPECT_EQ(o.exit_code, 2) << cmd << "\n" << o.out;
    EXPECT_NE(o.out.find("an empty key would turn authentication off"), std::string::npos) << cmd << "\n" << o.out;
  }
  // So is an empty variable (`-e SLUICE_API_KEY=$KEY`, KEY unset), which CLI11 alone would skip.
  const std::string bin = sluice::testing::binary_dir() + "/src/cli/sluice";
  const char* route = " route --backend http://127.0.0.1:1";
  for (auto [var, args] : {std::pair{"SLUICE_API_KEY", " serve"}, std::pair{"SLUICE_API_KEY", route},
                           std::pair{"SLUICE_ADMIN_KEY", route}}) {
    const std::string line = std::string(var) + "= " + bin + args;
    const std::string out = shell(line + " 2>&1; echo exit=$?");
    EXPECT_NE(out.find("is set but empty, and an empty key would turn authentication off"), std::string::npos)
        << line << "\n" << out;
    EXPECT_NE(out.find("exit=2"), std::string::npos) << line << "\n" << out;
  }
}

// An origin a browser could never send (a path, a trailing slash, no scheme) is refused: it would
// match nothing, without a word; so is an empty model name.
TEST(Cli, ServeChecksOriginsAndTheModelName) {
  for (const char* bad : {"notanorigin", "https://app.example/", "https://app.example/x", "https://", "1x://app",
                          "://app", "https://app.example?q"}) {
    Output o = run(std::string("serve --allowed-origins ") + bad, true);
    EXPECT_EQ(o.exit_code, 2) << bad << "\n" << o.out;
    EXPECT_NE(o.out.find("is not an origin"), std::string::npos) << bad << "\n" << o.out;
  }
  Output empty = run("serve --served-model-name ''", true);
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.out.find("must not be empty"), std::string::npos) << empty.out;
}

// A --chat-template that cannot give a prompt holding the user's text (a folder, an empty file, a
// fixed text) is refused at start, not a server whose every chat request fails or reaches the
// model without what was asked. (`timeout`: a server that took one would run until killed.)
TEST(Cli, AChatTemplateThatLeavesOutTheMessagesIsRefused) {
  const std::string sluice = sluice::testing::binary_dir() + "/src/cli/sluice";
  const std::string dir = ::testing::TempDir() + "/cli_chat_templates";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/empty.jinja").flush();
  std::ofstream(dir + "/fixed.jinja") << "{{ bos_token }}Hello";
  const std::pair<std::string, const char*> cases[] = {
      {dir, "is a folder: give the template's file"},
      {dir + "/empty.jinja", "renders an empty prompt, without the message's text"},
      {dir + "/fixed.jinja", "renders 'Hello', without the message's text"},
  };
  for (const auto& [file, says] : cases) {
    const std::string out =
        shell("timeout 60 " + sluice + " serve --port 0 --chat-template " + file + " 2>&1; echo \"exit $?\"");
    EXPECT_NE(out.find(says), std::string::npos) << file << ": " << out;
    EXPECT_NE(out.find("exit 1\n"), std::string::npos) << file << ": " << out;
  }
  std::filesystem::remove_all(dir);
}

// A --backends-file's bad line is named by its number; a file that lists none is said so.
TEST(Cli, RouteNamesTheBackendsFilesBadLine) {
  const std::string bad = ::testing::TempDir() + "/backends_bad.txt", none = ::testing::TempDir() + "/backends_none.txt";
  std::ofstream(bad) << "# replicas\nhttp://127.0.0.1:1\n\nnot a url\n";
  std::ofstream(none) << "# nothing yet\n\n";
  Output b = run("route --backends-file " + bad, true);
  EXPECT_EQ(b.exit_code, 2) << b.out;
  EXPECT_NE(b.out.find("--backends-file '" + bad + "' line 4: "), std::string::npos) << b.out;
  Output n = run("route --backends-file " + none, true);
  EXPECT_EQ(n.exit_code, 2) << n.out;
  EXPECT_NE(n.out.find("lists no backend"), std::string::npos) << n.out;
}

// A leaf of `route rollout` / `route shadow` takes its command's options (--url, --admin-key,
// --json) and its --help says so.
TEST(Cli, RouteLeafHelpListsItsCommandsOptions) {
  for (const char* leaf : {"rollout start", "rollout status", "rollout abort", "shadow report", "shadow set"}) {
    Output o = run(std::string("route ") + leaf + " --help");
    EXPECT_EQ(o.exit_code, 0) << leaf;
    EXPECT_NE(o.out.find("--url TEXT=http://127.0.0.1:8080"), std::string::npos) << leaf << "\n" << o.out;
    EXPECT_NE(o.out.find("--admin-key"), std::string::npos) << leaf;
    EXPECT_NE(o.out.find("--json"), std::string::npos) << leaf;
  }
  // And they are accepted after the leaf: an unreachable router is an error naming it.
  Output o = run("route rollout status --url http://127.0.0.1:1 --admin-key k --json", true);
  EXPECT_EQ(o.exit_code, 1) << o.out;
  EXPECT_NE(o.out.find("127.0.0.1:1"), std::string::npos) << o.out;
  // A rollout file that is a folder, empty, or not a mapping is named as such before any call.
  const std::string dir = ::testing::TempDir(), empty = dir + "/empty_rollout.yaml", text = dir + "/text_rollout.yaml";
  std::ofstream(empty) << "";
  std::ofstream(text) << "just words\n";
  for (auto [file, why] : {std::pair{dir, "it is a folder, not a file"}, std::pair{empty, "not an empty file"},
                           std::pair{text, "not a string"}}) {
    Output r = run("route rollout start " + file + " --url http://127.0.0.1:1 --admin-key k", true);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << file << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}

TEST(Cli, EngineFlagsAreCheckedWithClearErrors) {
  // One rule: a flag's value that is wrong exits 2, whether the flag parser or a later check
  // finds it; a failure of the work itself exits 1.
  Output a = run("generate -p hi --kv-cache-memory lots", true);
  EXPECT_EQ(a.exit_code, 2);
  EXPECT_NE(a.out.find("--kv-cache-memory must be 'auto', a size such as 512MiB"), std::string::npos) << a.out;
  Output b = run("generate -p hi --kv-cache-memory 100", true);
  EXPECT_EQ(b.exit_code, 2);
  Output huge = run("generate -p hi --kv-cache-memory 2TB", true);
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.out.find("is more than this machine's memory"), std::string::npos) << huge.out;
  EXPECT_EQ(huge.out.find("bad_alloc"), std::string::npos) << huge.out;
  EXPECT_NE(b.out.find("a KV cache of 100 bytes holds no block"), std::string::npos) << b.out;
  Output c = run("generate -p hi --max-num-seqs 0", true);
  EXPECT_EQ(c.exit_code, 2);
  Output d = run("generate -p hi --kv-cache-dtype q8", true);
  EXPECT_EQ(d.exit_code, 2);
  Output e = run("generate --prompts /no/such/file", true);
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_NE(e.out.find("cannot read prompts file '/no/such/file'"), std::string::npos) << e.out;
  // Invalid UTF-8 is named by its line in the file (the empty line 2 is not a prompt).
  const std::string latin1 = ::testing::TempDir() + "/latin1_prompts.txt";
  std::ofstream(latin1) << "fine\n\nalso fine\ncaf\xe9 au lait\n";
  Output u = run("generate --prompts " + latin1, true);
  EXPECT_EQ(u.exit_code, 1);
  EXPECT_NE(u.out.find("line 4: not valid UTF-8 at byte 4 of the line"), std::string::npos) << u.out;
  Output off = run("generate -p hi --spec off --draft-model demo", true);
  EXPECT_EQ(off.exit_code, 2);
  EXPECT_NE(off.out.find("--spec off and --draft-model: the draft model would never be used"), std::string::npos)
      << off.out;
  // A prompt longer than the KV cache is refused, naming both sizes.
  Output f = run("generate -p 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                 "fifteen sixteen seventeen' --kv-cache-memory 32KiB --block-size 4",
                 true);
  EXPECT_EQ(f.exit_code, 1);
  EXPECT_NE(f.out.find("the KV cache holds only 16 tokens"), std::string::npos) << f.out;
}

TEST(Cli, BadInputIsAClearErrorWithExitCode) {
  const std::string path = ::testing::TempDir() + "/not_a_model.gguf";
  std::ofstream(path) << "hello, not a model";
  Output o = run("model info " + path, true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("not a GGUF file"), std::string::npos) << o.out;
  Output u = run("generate --no-such-flag", true);
  EXPECT_EQ(u.exit_code, 2);
  Output m = run("model make --dtype q4_9 -o /tmp/never.gguf", true);
  EXPECT_EQ(m.exit_code, 2);
  Output layers = run("model make --layers 0 -o /tmp/never.gguf", true);
  EXPECT_EQ(layers.exit_code, 2) << layers.out;
  EXPECT_NE(m.out.find("unknown dtype 'q4_9'"), std::string::npos);
  std::filesystem::remove(path);
  // A bad command line: exit 2, and what the message says (numbers out of range say what they
  // must be, never CLI11's range up to DBL_MAX written out).
  const std::pair<const char*, const char*> usage[] = {
      {"route --backend http://127.0.0.1:1 --health-interval 0", "--health-interval: must be a number > 0, got '0'"},
      {"bench --url http://127.0.0.1:1 --rate 0", "--rate: must be a number > 0, got '0'"},
      {"route --backend http://127.0.0.1:1 --port 70000", "70000 not in range 0 to 65535"},
      {"serve --port 70000", "70000 not in range 0 to 65535"},
      {"route --backend http://127.0.0.1:1 --max-body-bytes 0", "--max-body-bytes"},
      {"route --backend http://127.0.0.1:1/v1", "without '/v1'"},
      {"generate -p hi --temp 9", "--temp must be in [0, 2], got 9"},
      {"bogus", "unknown command 'bogus'"},
      {"model make --ctx 99999999999 -o /tmp/never.gguf",
       "--ctx: must be an integer in -2147483648..2147483647, got 99999999999"},
      {"generate -p hi --stop ''", "--stop: must not be empty"},
      {"model quantise a b", "unknown model command 'quantise' (model commands: info, make, quantize;"},
      {"route rollout statuz", "unknown route rollout command 'statuz' (route rollout commands: "},
      {"route --backend http://127.0.0.1:1,version=v1 --shadow v2",
       "--shadow v2 copies nothing without --shadow-fraction"},
      {"route --backend http://127.0.0.1:1 --shadow-fraction 0.5", "--shadow-fraction needs --shadow VERSION"},
      // Settings of a part that is off were taken without a word.
      {"route --backend http://127.0.0.1:1 --shadow-by session", "--shadow-by picks how requests are copied"},
      {"route --backend http://127.0.0.1:1 --shadow-by request", "--shadow-by picks how requests are copied"},
      {"route --backend http://127.0.0.1:1 --rollout-eval-db e.db", "--rollout-eval-db stores the eval gates"},
      {"route --backend http://127.0.0.1:1,weight=2,weight=3", "'weight=' is given twice"},
      {"eval --db /tmp history", "'/tmp' is a folder: give the SQLite file"},
      {"route shadow sett --fraction 1", "unknown route shadow command 'sett'"},
      {"generate -p hi --stop-token 999999", "stop token id 999999 is outside the vocabulary"},
      {"generate -p hi --seed -1", "--seed must be an integer"},
      // NaN passed every range (each comparison with it is false): a server that answered nothing.
      {"serve --idle-timeout nan", "--idle-timeout: must be a number in 0.1..3600, got 'nan'"},
      {"serve --drain-timeout NaN", "--drain-timeout: must be a number in 0..3600, got 'NaN'"},
      {"route --backend http://127.0.0.1:1 --shadow-fraction nan", "--shadow-fraction: must be a number in 0..1"},
      // CLI11 said "At Most 1 required but received 2".
      {"generate -p hi --temp 0.5 --temp 0.7", "--temp is given 2 times: give it once"},
      {"model make -o ''", "--output: must not be empty"},
      // Said against the machine's memory, not as a count of blocks.
      {"generate -p hi --kv-cache-memory 2TB", "more than this machine's memory"},
  };
  for (const auto& [args, says] : usage) {
    Output r = run(args, true);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(says), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("17976931348623157"), std::string::npos) << args << ": " << r.out;
  }
}

// A reader that goes away (| head -c 1) is a write error with status 1, not a death by SIGPIPE.
TEST(Cli, ClosedPipeIsAWriteErrorNotSigpipe) {
  const std::string bash = "bash -c '" + sluice::testing::binary_dir() +
                           "/src/cli/sluice generate -p hi -n 2000 --ignore-eos 2>/dev/null | head -c 1 >/dev/null; "
                           "echo ${PIPESTATUS[0]}'";
  EXPECT_EQ(shell(bash), "1\n");  // 141 would be SIGPIPE
}

TEST(Cli, OutputThatCannotBeWrittenIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Output o = run("generate -p hi -n 3", true, "/dev/full");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("cannot write to standard output"), std::string::npos) << o.out;
  Output j = run("model info demo", true, "/dev/full");
  EXPECT_EQ(j.exit_code, 1);
  for (const char* args : {"--help", "--version", "route rollout --help"}) {
    Output h = run(args, true, "/dev/full");
    EXPECT_EQ(h.exit_code, 1) << args;
    EXPECT_NE(h.out.find("cannot write to standard output"), std::string::npos) << args << ": " << h.out;
  }
}

// A KV cache smaller than one context bounds every sequence: said at start.
TEST(Cli, AKvCacheSmallerThanTheContextIsAWarning) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  Output o = run("generate -m " + kShared + "/models/stories260K.gguf -p Once -n 64 --kv-cache-memory 0.000001", true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("warning: the KV cache holds fewer tokens than the model's context (128): a sequence ends at 32 "
                       "tokens"),
            std::string::npos)
      << o.out;
  Output plain = run("generate -m " + kShared + "/models/stories260K.gguf -p Once -n 4", true);
  EXPECT_EQ(plain.out.find("warning: the KV cache"), std::string::npos) << plain.out;
}

// Every --seed is an integer in 0..2^64-1, in every command that takes one.
TEST(Cli, SeedsOutOfRangeAreRefused) {
  const std::string never = ::testing::TempDir() + "/cli_seed_never.gguf";
  const std::vector<std::string> cases = {"model make -o " + never + " --seed -1", "model make -o " + never + " --seed 1e30",
                                          "bench --url http://127.0.0.1:1 --seed -2",
                                          "eval compare 1 --baseline x --seed -1"};
  for (const std::string& args : cases) {
    Output o = run(args, true);
    EXPECT_EQ(o.exit_code, 2) << args << ": " << o.out;
    EXPECT_NE(o.out.find("must be an integer in 0..18446744073709551615"), std::string::npos) << args << ": " << o.out;
  }
  EXPECT_FALSE(std::filesystem::exists(never));
}

// An IPv6 address is bracketed in the URL the server prints (clients reject http://::1:PORT).
TEST(Cli, ServeOnIpv6PrintsABracketedUrl) {
  if (access("/proc/net/if_inet6", R_OK) != 0) GTEST_SKIP() << "no IPv6";
  const std::string cmd = "timeout -s INT 2 " + sluice::testing::binary_dir() +
                          "/src/cli/sluice serve --host ::1 --port 0 2>/dev/null | head -n 1";
  const std::string line = shell(cmd);
  if (line.empty()) GTEST_SKIP() << "cannot listen on ::1 here";
  EXPECT_TRUE(line.starts_with("sluice serve: listening on http://[::1]:")) << line;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

}  // namespace
}  // namespace sluice
