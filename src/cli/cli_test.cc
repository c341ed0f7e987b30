// End-to-end tests of the sluice binary: run it as a user would and check what it prints.
#include <sys/stat.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "common/utf8.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernel_path.h"

namespace sluice {
namespace {

struct Output {
  int exit_code;
  std::string out;  // stdout (stderr too when asked)
};

// Runs sluice with `args`; captures stdout (and stderr when asked). With stdout_to, stdout goes
// to that file instead and only stderr is captured.
Output run(const std::string& args, bool with_stderr = false, const std::string& stdout_to = "") {
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
std::string shell(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

const std::string kShared = sluice::testing::shared_dir();
bool have_shared() { return std::filesystem::exists(kShared + "/models/stories260K.gguf"); }

TEST(Cli, HelpListsTheCommands) {
  Output o = run("--help");
  EXPECT_EQ(o.exit_code, 0);
  for (const char* cmd : {"generate", "tokenize", "model"}) EXPECT_NE(o.out.find(cmd), std::string::npos) << cmd;
}

TEST(Cli, GenerateJsonOnStories260K) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  Output o = run("generate -m " + kShared + "/models/stories260K.gguf -p 'Once upon a time' -n 12 --json --logprobs 3");
  ASSERT_EQ(o.exit_code, 0);
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt"], "Once upon a time");
  EXPECT_EQ(j["prompt_tokens"].size(), 5u);
  EXPECT_EQ(j["tokens"].size(), 12u);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["text"].get<std::string>().rfind(", there was a little girl", 0), 0u) << j["text"];
  ASSERT_EQ(j["logprobs"].size(), 12u);
  EXPECT_EQ(j["logprobs"][0]["top_logprobs"].size(), 3u);
  EXPECT_EQ(j["logprobs"][0]["token"], j["tokens"][0]);
}

TEST(Cli, GenerateStreamsAndSummarizes) {
  Output o = run("generate -p hello -n 5 --ignore-eos", true);
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("demo model has random weights"), std::string::npos);
  EXPECT_NE(o.out.find("generated tokens: 5 (length)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("decode:"), std::string::npos);
}

TEST(Cli, TokenizeVocabularyOnlyFile) {
  if (!have_shared()) GTEST_SKIP() << "no shared tokenizers";
  Output o = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --no-bos 'Hello world'");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.out, "15043 3186\n");
  Output pieces = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --pieces 'Hello'");
  EXPECT_NE(pieces.out.find("1\t'<s>'\t<s>"), std::string::npos) << pieces.out;
}

TEST(Cli, ModelMakeThenInfo) {
  const std::string path = ::testing::TempDir() + "/cli_made.gguf";
  Output made = run("model make --arch qwen3 --preset tiny --head-dim 32 --dtype bf16 --seed 3 -o " + path);
  ASSERT_EQ(made.exit_code, 0);
  Output info = run("model info " + path);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_NE(info.out.find("architecture:    qwen3"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("head dim 32"), std::string::npos);
  EXPECT_NE(info.out.find("BF16"), std::string::npos);
  EXPECT_NE(info.out.find("tokenizer:       bpe"), std::string::npos);
  Output gen = run("generate -m " + path + " -p abc -n 4 --ignore-eos --json");
  ASSERT_EQ(gen.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(gen.out)["tokens"].size(), 4u);
  std::filesystem::remove(path);
}

// Quantize the shared F32 model to a K-quant mix, read it back, generate; a quantized input and an
// unknown mix are clear errors.
TEST(Cli, ModelQuantizeThenInfoAndGenerate) {
  const std::string in = kShared + "/models/quant/llama-d256-s21-F32.gguf";
  const std::string path = ::testing::TempDir() + "/cli_quantized.gguf";
  Output q = run("model quantize " + in + " " + path + " --type Q4_K_M -t 2", true);  // either case
  ASSERT_EQ(q.exit_code, 0) << q.out;
  EXPECT_NE(q.out.find("q4_k_m (F32 x9, Q4_K x25, Q6_K x5)"), std::string::npos) << q.out;
  Output info = run("model info " + path);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_NE(info.out.find("Q4_K      25 tensors"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("4.50 bits per weight"), std::string::npos) << info.out;
  Output gen = run("generate -m " + path + " -p abc -n 4 --ignore-eos --json");
  ASSERT_EQ(gen.exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(gen.out)["tokens"].size(), 4u);
  Output again = run("model quantize " + path + " " + path + ".2 --type q4_0", true);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.out.find("is Q4_K: quantize from a file of F32, F16 or BF16 weights"), std::string::npos) << again.out;
  EXPECT_FALSE(std::filesystem::exists(path + ".2"));
  Output bad = run("model quantize " + in + " " + path + ".2 --type q4_k", true);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("unknown quantization type 'q4_k' (choose q8_0, "), std::string::npos) << bad.out;
  std::filesystem::remove(path);
  Output vocab_only = run("model quantize " + kShared + "/tokenizer/ggml-vocab-qwen2.gguf " + path + " --type q8_0", true);
  EXPECT_EQ(vocab_only.exit_code, 1);
  EXPECT_NE(vocab_only.out.find("holds no tensors (a vocabulary-only file?)"), std::string::npos) << vocab_only.out;
  // A context must hold a prompt token and a generated one.
  Output ctx = run("model make --ctx 1 -o " + path, true);
  EXPECT_EQ(ctx.exit_code, 2);
  EXPECT_NE(ctx.out.find("--ctx must be in 2.."), std::string::npos) << ctx.out;
  EXPECT_FALSE(std::filesystem::exists(path));
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

TEST(Cli, DemoInfoSaysGibberish) {
  Output o = run("model info demo");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("RANDOM weights"), std::string::npos);
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
}

// An origin a browser could never send (a path, a trailing slash, no scheme) is refused: it would
// match nothing, without a word; so is an empty model name.
TEST(Cli, ServeChecksOriginsAndTheModelName) {
  for (const char* bad : {"notanorigin", "https://app.example/", "https://app.example/x"}) {
    Output o = run(std::string("serve --allowed-origins ") + bad, true);
    EXPECT_EQ(o.exit_code, 2) << bad << "\n" << o.out;
    EXPECT_NE(o.out.find("is not an origin"), std::string::npos) << bad << "\n" << o.out;
  }
  Output empty = run("serve --served-model-name ''", true);
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.out.find("must not be empty"), std::string::npos) << empty.out;
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
}

TEST(Cli, GenerateRunsAPromptsFileConcurrently) {
  const std::string path = ::testing::TempDir() + "/prompts.txt";
  std::ofstream(path) << "hello\n\nworld\n\"a json\\nstring\"\n";
  Output o = run("generate --prompts " + path + " -n 4 --ignore-eos --json --max-num-seqs 2");
  ASSERT_EQ(o.exit_code, 0) << o.out;
  std::vector<nlohmann::json> lines;
  size_t pos = 0;
  for (size_t nl; (nl = o.out.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    lines.push_back(nlohmann::json::parse(o.out.substr(pos, nl - pos)));
  }
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["prompt"], "hello");
  EXPECT_EQ(lines[1]["prompt"], "world");
  EXPECT_EQ(lines[2]["prompt"], "a json\nstring");
  // Each result names its line of the file: the blank line 2 is skipped, not renumbered.
  EXPECT_EQ(lines[0]["line"], 1);
  EXPECT_EQ(lines[1]["line"], 3);
  EXPECT_EQ(lines[2]["line"], 4);
  for (const auto& j : lines) EXPECT_EQ(j["tokens"].size(), 4u);
  // Each result equals running its prompt alone.
  Output alone = run("generate -p world -n 4 --ignore-eos --json");
  EXPECT_EQ(nlohmann::json::parse(alone.out)["tokens"], lines[1]["tokens"]);
  std::filesystem::remove(path);
}

TEST(Cli, GenerateParallelCopiesSummarizeTheRun) {
  Output o = run("generate -p hello -n 6 --ignore-eos --parallel 4 --temp 0.8 --kv-cache-memory 4MiB", true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("KV cache: 4.0 MiB f16, 128 blocks of 16 = 2048 tokens (2048 bytes per token)"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("requests: 4 (0 failed), output tokens: 24"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("--- [3] 6 tokens (length)"), std::string::npos) << o.out;
  // Greedy copies are one computation.
  Output g = run("generate -p hello -n 6 --ignore-eos --parallel 4", true);
  EXPECT_NE(g.out.find("coalesced: 3"), std::string::npos) << g.out;
}

TEST(Cli, GenerateSharesPromptPrefixesUnlessTold) {
  const std::string path = ::testing::TempDir() + "/shared_prompts.txt";
  {
    std::ofstream out(path);
    const std::string system = "You are a helpful assistant. Answer briefly and truthfully, and say so when unsure.";
    for (int i = 0; i < 6; ++i) out << system << " Question " << i << "?\n";
  }
  // One at a time, so each request finds the earlier ones' blocks.
  Output on = run("generate --prompts " + path + " -n 2 --parallel 1 --block-size 4", true);
  ASSERT_EQ(on.exit_code, 0) << on.out;
  const auto pos = on.out.find("cached prompt tokens: ");
  ASSERT_NE(pos, std::string::npos) << on.out;
  EXPECT_NE(on.out.substr(pos, 24), "cached prompt tokens: 0 ") << on.out;
  Output off = run("generate --prompts " + path + " -n 2 --parallel 1 --block-size 4 --no-prefix-cache", true);
  ASSERT_EQ(off.exit_code, 0) << off.out;
  EXPECT_NE(off.out.find("cached prompt tokens: 0 of"), std::string::npos) << off.out;
  // Same outputs either way.
  auto strip = [](const std::string& s) { return s.substr(s.find("--- line 1:")); };
  EXPECT_EQ(strip(on.out).substr(0, 200), strip(off.out).substr(0, 200));
  Output pin = run("generate -p hi --pin-prefix 'You are'", true);
  EXPECT_EQ(pin.exit_code, 2);
  EXPECT_NE(pin.out.find("--pin-prefix needs --kv-eviction pinned"), std::string::npos) << pin.out;
  Output pinned = run("generate -p 'You are a bot' -n 2 --kv-eviction pinned --pin-prefix 'You are'", true);
  EXPECT_EQ(pinned.exit_code, 0) << pinned.out;
  std::filesystem::remove(path);
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
      {"generate -p hi --stop-token 999999", "stop token id 999999 is outside the vocabulary"},
      {"generate -p hi --seed -1", "--seed must be an integer"},
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
}

TEST(Cli, ModelMakeReplacesOnlyRegularFiles) {
  const std::string dir = ::testing::TempDir() + "/cli_make_dir";
  std::filesystem::create_directories(dir);
  Output o = run("model make -o " + dir, true);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.out.find("is not a regular file"), std::string::npos) << o.out;
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  const std::string target = ::testing::TempDir() + "/cli_make_target", link = ::testing::TempDir() + "/cli_make_link";
  std::ofstream(target) << "keep";
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  Output l = run("model make -o " + link, true);
  EXPECT_EQ(l.exit_code, 1);
  EXPECT_NE(l.out.find("it is a symbolic link"), std::string::npos) << l.out;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  // A file replaced keeps its owner, group and mode (where this process may give them: root).
  if (::geteuid() == 0) {
    const std::string owned = ::testing::TempDir() + "/cli_make_owned.gguf";
    std::ofstream(owned) << "old";
    ASSERT_EQ(::chown(owned.c_str(), 65534, 65534), 0);
    ASSERT_EQ(::chmod(owned.c_str(), 0640), 0);
    ASSERT_EQ(run("model make --preset tiny -o " + owned, true).exit_code, 0);
    struct stat st {};
    ASSERT_EQ(::stat(owned.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u);
    EXPECT_EQ(st.st_gid, 65534u);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    std::filesystem::remove(owned);
  }
  std::filesystem::remove(link);
  std::filesystem::remove(target);
  std::filesystem::remove_all(dir);
}

// An output that is the input however spelt (absolute, through a link) is refused, the input
// kept: quantize's model, make's --vocab.
TEST(Cli, OutputThatIsTheInputIsRefused) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  const std::string dir = ::testing::TempDir() + "/cli_same";
  std::filesystem::create_directories(dir);
  const std::string in = dir + "/in.gguf", link = dir + "/link.gguf";
  std::filesystem::copy_file(kShared + "/models/stories260K.gguf", in, std::filesystem::copy_options::overwrite_existing);
  const auto size = std::filesystem::file_size(in);
  std::filesystem::remove(link);
  std::filesystem::create_symlink(in, link);
  for (const std::string& out : {dir + "/./in.gguf", link}) {
    Output q = run("model quantize " + in + " " + out + " --type q8_0", true);
    EXPECT_EQ(q.exit_code, 2) << q.out;
    EXPECT_NE(q.out.find("is the input file"), std::string::npos) << q.out;
    Output m = run("model make --vocab " + link + " -o " + out, true);
    EXPECT_EQ(m.exit_code, 2) << m.out;
    EXPECT_NE(m.out.find("is the --vocab file"), std::string::npos) << m.out;
  }
  EXPECT_EQ(std::filesystem::file_size(in), size);
  // An unreadable --vocab file is a bad file (1), not a bad command line.
  Output missing = run("model make --vocab " + dir + "/nothing.gguf -o " + dir + "/x.gguf", true);
  EXPECT_EQ(missing.exit_code, 1) << missing.out;
  std::filesystem::remove_all(dir);
}

// What make writes is loaded back with its tokenizer: a --vocab whose tokenizer cannot load
// fails the make, and the file is removed.
TEST(Cli, ModelMakeChecksTheTokenizerItCopies) {
  if (!have_shared()) GTEST_SKIP() << "no shared models";
  auto src = gguf::File::open(kShared + "/models/stories260K.gguf");
  ASSERT_TRUE(src) << src.error().message();
  gguf::Writer w;
  for (const auto& [key, value] : (*src)->metadata()) w.set(std::string(key), gguf::to_owned(value));
  w.set_string("tokenizer.ggml.model", "bogus");
  const std::string vocab = ::testing::TempDir() + "/cli_bogus_vocab.gguf", out = ::testing::TempDir() + "/cli_bogus.gguf";
  ASSERT_TRUE(w.write_file(vocab));
  std::ofstream(out) << "an earlier output";  // checked before it is replaced: kept
  Output m = run("model make --vocab " + vocab + " -o " + out, true);
  EXPECT_EQ(m.exit_code, 1) << m.out;
  EXPECT_NE(m.out.find("the made model's tokenizer does not load (not kept)"), std::string::npos) << m.out;
  std::ifstream kept(out);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "an earlier output");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(::testing::TempDir())) {
    entries += e.path().filename().string().starts_with("cli_bogus.gguf.partial");
  }
  EXPECT_EQ(entries, 0);
  std::filesystem::remove(vocab);
  std::filesystem::remove(out);
}

// Writes go to a file with no name until complete: nothing is left beside the output, a file
// it replaces keeps its mode, and a missing directory is named as such.
TEST(Cli, ModelMakeLeavesNoTemporaryFiles) {
  const std::string dir = ::testing::TempDir() + "/cli_tmpfile";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = dir + "/m.gguf";
  std::ofstream(out) << "old";
  std::filesystem::permissions(out, std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  Output o = run("model make --preset tiny -o " + out, true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_EQ(std::filesystem::status(out).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 1);
  Output missing = run("model make --preset tiny -o " + dir + "/no/such/m.gguf", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("cannot write '" + dir + "/no/such/m.gguf': No such file or directory"), std::string::npos)
      << missing.out;
  std::filesystem::remove_all(dir);
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

// More prompts than the engine queues at once: submitted as room frees (--parallel is a cap);
// a CRLF file reads as LF; a prompt the engine refuses is reported failed, the rest still run.
TEST(Cli, GeneratePacesAPromptsFileToTheQueue) {
  const std::string path = ::testing::TempDir() + "/many_prompts.txt";
  {
    std::ofstream f(path);
    for (int i = 0; i < 40; ++i) f << "prompt " << i << "\r\n";
  }
  Output o = run("generate --prompts " + path + " -n 1 --json --max-queued-requests 4 --max-num-seqs 2", true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("requests: 40 (0 failed)"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find(R"("prompt":"prompt 39")"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("\\r"), std::string::npos) << o.out;
  {
    std::ofstream f(path);
    f << "short\n";
    for (int i = 0; i < 3000; ++i) f << "word ";
    f << "\nalso short\n";
  }
  Output one_bad = run("generate --prompts " + path + " -n 2 --ignore-eos", true);
  EXPECT_EQ(one_bad.exit_code, 1) << one_bad.out;
  EXPECT_NE(one_bad.out.find("requests: 3 (1 failed)"), std::string::npos) << one_bad.out;
  EXPECT_NE(one_bad.out.find("--- line 3: 2 tokens (length)"), std::string::npos) << one_bad.out;
  std::filesystem::remove(path);
}

TEST(Cli, PiecesAreValidUtf8) {
  if (!have_shared()) GTEST_SKIP() << "no shared tokenizers";
  // U+1F642 is not in the SPM vocabulary: it falls back to four byte tokens, each shown escaped.
  Output o = run("tokenize -m " + kShared + "/tokenizer/ggml-vocab-llama-spm.gguf --pieces \"$(printf '\\360\\237\\231\\202')\"");
  ASSERT_EQ(o.exit_code, 0);
  EXPECT_NE(o.out.find("'\\xf0'"), std::string::npos) << o.out;
  EXPECT_TRUE(utf8_is_valid(o.out)) << o.out;
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

// A lower-bit copy as draft: the same text, its use reported; a draft with another vocabulary
// and --spec draft without a draft are refused.
TEST(Cli, DraftModelKeepsTheOutput) {
  const std::string target = kShared + "/models/quant/llama-d256-s21-Q8_0.gguf";
  const std::string draft = kShared + "/models/quant/llama-d256-s21-Q4_K_M.gguf";
  const std::string gen = "generate -m " + target + " -p 'The little' -n 24 --temperature 0";
  Output plain = run(gen);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  Output drafted = run(gen + " --draft-model " + draft + " --spec-adaptive off");
  ASSERT_EQ(drafted.exit_code, 0) << drafted.out;
  EXPECT_EQ(drafted.out, plain.out);
  Output report = run(gen + " --draft-model " + draft + " --spec-adaptive off", true);
  EXPECT_NE(report.out.find("speculative decoding: draft model " + draft), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("draft tokens accepted"), std::string::npos) << report.out;
  // Several prompts: the summary says it too.
  Output several = run("generate -m " + target + " -p 'The little' --parallel 2 -n 8 --draft-model " + draft +
                       " --spec-adaptive off", true);
  ASSERT_EQ(several.exit_code, 0) << several.out;
  EXPECT_NE(several.out.find("draft tokens accepted"), std::string::npos) << several.out;
  Output ngram = run(gen + " --spec ngram --spec-ngram-min 1", true);
  EXPECT_EQ(ngram.exit_code, 0) << ngram.out;
  EXPECT_NE(ngram.out.find("speculative decoding: prompt lookup, suffixes of 1 to 4 tokens"), std::string::npos);
  Output other = run(gen + " --draft-model " + kShared + "/models/stories260K.gguf", true);
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.out.find("the draft model cannot draft for this model: the vocabularies differ in kind"),
            std::string::npos) << other.out;
  Output none = run("generate -p x -n 2 --spec draft", true);
  EXPECT_NE(none.out.find("--spec draft needs --draft-model FILE"), std::string::npos) << none.out;
  Output both = run("generate -p x -n 2 --spec ngram --draft-model " + draft, true);
  EXPECT_NE(both.out.find("one proposer at a time"), std::string::npos) << both.out;
  // Settings of a proposer that is off are refused, not ignored; a draft file that cannot be
  // read is a bad file (1), not a bad command line.
  Output lookup_off = run("generate -p x -n 2 --draft-model " + draft + " --spec-ngram-min 3", true);
  EXPECT_EQ(lookup_off.exit_code, 2);
  EXPECT_NE(lookup_off.out.find("set prompt lookup, which is off here"), std::string::npos) << lookup_off.out;
  Output no_draft = run("generate -p x -n 2 --draft-kv-cache-memory 1MiB", true);
  EXPECT_EQ(no_draft.exit_code, 2);
  EXPECT_NE(no_draft.out.find("give --draft-model FILE"), std::string::npos) << no_draft.out;
  Output missing = run("generate -p x -n 2 --draft-model /no/such/draft.gguf", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("--draft-model: "), std::string::npos) << missing.out;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// sluice pair over the quantized family: a table, the JSON report and the chart; usage errors.
TEST(Cli, PairRanksDraftsAndWritesItsReports) {
  const std::string q = kShared + "/models/quant/llama-d256-s21-";
  const std::string json = ::testing::TempDir() + "/pair.json", svg = ::testing::TempDir() + "/pair.svg";
  Output o = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf --draft " + q + "Q2_K.gguf --draft " +
                 kShared + "/models/stories260K.gguf --ngram -p 'The quick brown fox' -p 'Once upon a time' " +
                 "--max-tokens 16 --spec-tokens 3 --batch-sizes 1,4 --confirm 1 --json " + json + " --svg " + svg);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("llama-d256-s21-Q8_0.gguf"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("refused: the vocabularies differ in kind"), std::string::npos) << o.out;
  const auto report = nlohmann::json::parse(std::ifstream(json), nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  ASSERT_EQ(report["candidates"].size(), 4u);
  double q8 = -1, q2 = -1;
  for (const auto& c : report["candidates"]) {
    if (c["name"].get<std::string>().ends_with("Q8_0.gguf")) q8 = c["acceptance"];
    if (c["name"].get<std::string>().ends_with("Q2_K.gguf")) q2 = c["acceptance"];
    if (c.contains("confirmed")) {
      EXPECT_TRUE(c["confirmed"]["outputs_identical"].get<bool>());
    }
  }
  EXPECT_GT(q8, q2);
  EXPECT_EQ(report["candidates"].back()["refused"].get<std::string>().find("the vocabularies differ"), 0u);
  std::ifstream chart(svg);
  const std::string text((std::istreambuf_iterator<char>(chart)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(text.starts_with("<svg")) << text.substr(0, 100);
  EXPECT_NE(text.find("<title>ngram</title>"), std::string::npos);
  Output none = run("pair --target " + q + "F32.gguf -p x", true);
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.out.find("give at least one candidate"), std::string::npos) << none.out;
  Output no_prompts = run("pair --target " + q + "F32.gguf --ngram", true);
  EXPECT_NE(no_prompts.out.find("give the prompts"), std::string::npos) << no_prompts.out;
  // Checked before any measuring: the report's folder, an empty prompt.
  Output folder = run("pair --target " + q + "F32.gguf --ngram -p x --json /no/such/dir/p.json", true);
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_NE(folder.out.find("--json: '/no/such/dir/p.json': the folder '/no/such/dir' does not exist"), std::string::npos)
      << folder.out;
  Output same = run("pair --target " + q + "F32.gguf --ngram -p x --json " + ::testing::TempDir() + "/r --svg " + ::testing::TempDir() + "/./r", true);
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_NE(same.out.find("--json and --svg name the same file"), std::string::npos) << same.out;
  Output twice = run("pair --target " + q + "F32.gguf --ngram -p x --batch-sizes 1,4,1", true);
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.out.find("--batch-sizes lists a size twice"), std::string::npos) << twice.out;
  Output template_alone = run("pair --target " + q + "F32.gguf --ngram -p x --chat-template " + q + "F32.gguf", true);
  EXPECT_EQ(template_alone.exit_code, 2);
  EXPECT_NE(template_alone.out.find("--chat-template requires --suite"), std::string::npos) << template_alone.out;
  Output dup = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf --draft /" + q + "Q8_0.gguf -p x", true);
  EXPECT_EQ(dup.exit_code, 2);
  EXPECT_NE(dup.out.find("--draft names /" + q + "Q8_0.gguf twice"), std::string::npos) << dup.out;
  // The target as its own draft: refused, not ranked on noise; the target's step costs reported.
  Output self = run("pair --target " + q + "F32.gguf --draft " + q + "F32.gguf --ngram -p x --max-tokens 4 " +
                    "--spec-tokens 2 --batch-sizes 1,2 --confirm 0 --json " + json);
  ASSERT_EQ(self.exit_code, 0) << self.out;
  const auto self_report = nlohmann::json::parse(std::ifstream(json), nullptr, false);
  ASSERT_EQ(self_report["candidates"].size(), 2u);
  EXPECT_EQ(self_report["candidates"][1]["name"], q + "F32.gguf");
  EXPECT_EQ(self_report["candidates"][1]["kind"], "draft_model");
  EXPECT_EQ(self_report["candidates"][1]["refused"].get<std::string>().find("the target itself"), 0u);
  ASSERT_EQ(self_report["target_step_seconds"].size(), 2u);
  EXPECT_EQ(self_report["target_step_seconds"][1].size(), 3u);  // k + 1 = 1..3 tokens
  EXPECT_GT(self_report["target_step_seconds"][1][2].get<double>(), 0);
  Output empty = run("pair --target " + q + "F32.gguf --ngram -p x -p ''", true);
  EXPECT_NE(empty.out.find("prompt 1 is empty"), std::string::npos) << empty.out;
}

// pair --suite: an eval suite's prompts (a completion template and a chat prompt, over each
// test's vars) are the prompts, chat ones through the target's chat template.
TEST(Cli, PairTakesItsPromptsFromAnEvalSuite) {
  const std::string q = kShared + "/models/quant/llama-d256-s21-";
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream suite(dir + "/pair_suite.yaml");
    suite << "providers: [openai:completion:m]\n"
             "prompts:\n"
             "  - 'Tell me about {{ topic }}.'\n"
             "  - {label: chat, messages: [{role: user, content: 'A story about {{ topic }}'}]}\n"
             "tests:\n"
             "  - vars: {topic: cats}\n"
             "  - vars: {topic: rivers}\n"
             "  - vars: {topic: trains}\n"
             "likelihood:\n"
             "  - {name: ppl, type: perplexity, items: [{text: 'Some text.'}]}\n";
  }
  const std::string json = dir + "/pair_suite.json";
  Output o = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf --suite " + dir + "/pair_suite.yaml " +
                 "--max-tokens 8 --spec-tokens 2 --batch-sizes 1 --confirm 0 --json " + json, true);
  ASSERT_EQ(o.exit_code, 0) << o.out;
  EXPECT_NE(o.out.find("--suite " + dir + "/pair_suite.yaml: 6 prompts"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("1 likelihood items skipped"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("the suite's chat prompts use the default ChatML template"), std::string::npos) << o.out;
  const auto report = nlohmann::json::parse(std::ifstream(json), nullptr, false);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(report["prompts"], 6) << report.dump().substr(0, 300);
  Output both = run("pair --target " + q + "F32.gguf --ngram -p x --suite " + dir + "/pair_suite.yaml", true);
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.out.find("give the prompts one way"), std::string::npos) << both.out;
}

}  // namespace
}  // namespace sluice
