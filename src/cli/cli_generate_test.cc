// End-to-end tests of `sluice generate` (one prompt, a prompts file, parallel copies, a draft
// model) and `sluice pair`: run the binary as a user would and check what it prints.
#include "cli/cli_test_util.h"

namespace sluice {
namespace {

using namespace cli_testing;

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
  // `echo TEXT | ... --stdin` prompts as -p TEXT does: echo's newline is not part of the prompt.
  const std::string bin = sluice::testing::binary_dir() + "/src/cli/sluice";
  const std::string piped = shell("echo 'hello there' | " + bin + " generate --stdin -n 4 --json 2>/dev/null");
  const auto from_stdin = nlohmann::json::parse(piped), from_flag = nlohmann::json::parse(run("generate -p 'hello there' -n 4 --json").out);
  ASSERT_EQ(from_stdin["tokens"].size(), 4u) << piped;
  EXPECT_EQ(from_stdin["tokens"], from_flag["tokens"]) << piped;
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
  // A cache of a few blocks is said in KiB, not as "0.0 MiB".
  Output tiny = run("generate -p hello -n 2 --kv-cache-memory 64KiB", true);
  ASSERT_EQ(tiny.exit_code, 0) << tiny.out;
  EXPECT_NE(tiny.out.find("KV cache: 64.0 KiB f16, 2 blocks of 16"), std::string::npos) << tiny.out;
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
  Output pinned = run("generate -p 'You are a bot' -n 2 --kv-eviction pinned --block-size 2 --pin-prefix 'You are'", true);
  EXPECT_EQ(pinned.exit_code, 0) << pinned.out;
  // Refused rather than ignored: a prefix under one block (it would pin nothing), one past the
  // context (no prompt reaches it whole), an eviction policy with the prefix cache off.
  Output under = run("generate -p 'You are a bot' -n 2 --kv-eviction pinned --pin-prefix 'You are'", true);
  EXPECT_EQ(under.exit_code, 2) << under.out;
  EXPECT_NE(under.out.find("--pin-prefix 'You are' is 3 tokens, under one KV block of 16"), std::string::npos)
      << under.out;
  std::string words;
  for (int i = 0; i < 1100; ++i) words += "word ";
  Output past = run("generate -p x -n 2 --kv-eviction pinned --pin-prefix '" + words + "'", true);
  EXPECT_EQ(past.exit_code, 2) << past.out;
  EXPECT_NE(past.out.find("past the model's context of 2048: no prompt can hold it"), std::string::npos) << past.out;
  EXPECT_NE(past.out.find("'word word word word word word word word ...'"), std::string::npos) << past.out;
  Output off_policy = run("generate -p x -n 2 --kv-eviction lfu --no-prefix-cache", true);
  EXPECT_EQ(off_policy.exit_code, 2) << off_policy.out;
  EXPECT_NE(off_policy.out.find("--kv-eviction lfu chooses what the prefix cache evicts"), std::string::npos)
      << off_policy.out;
  Output wide = run("generate -m " + kShared + "/models/stories260K.gguf -p x -n 2 --block-size 1024", true);
  EXPECT_EQ(wide.exit_code, 0) << wide.out;
  EXPECT_NE(wide.out.find("warning: --block-size 1024 is past the model's context of"), std::string::npos) << wide.out;
  std::filesystem::remove(path);
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
  EXPECT_NE(ngram.out.find("speculative decoding (ngram): "), std::string::npos) << ngram.out;
  // Nothing drafted (one token comes from the prefill alone) is said, not left out; --json
  // carries the counts whenever speculation is on, and only then.
  const std::string one = "generate -m " + target + " -p 'The little' -n 1 --temperature 0";
  Output undrafted = run(one + " --spec ngram", true);
  EXPECT_NE(undrafted.out.find("speculative decoding (ngram): no draft tokens verified"), std::string::npos)
      << undrafted.out;
  Output json = run(one + " --spec ngram --json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j.at("speculation").at("draft_tokens"), 0) << json.out;
  EXPECT_EQ(j.at("speculation").at("accepted_tokens"), 0) << json.out;
  Output drafted_json = run(gen + " --draft-model " + draft + " --spec-adaptive off --json");
  ASSERT_EQ(drafted_json.exit_code, 0) << drafted_json.out;
  EXPECT_GT(nlohmann::json::parse(drafted_json.out).at("speculation").at("draft_tokens"), 0) << drafted_json.out;
  EXPECT_FALSE(nlohmann::json::parse(run(one + " --json").out).contains("speculation"));
  Output other = run(gen + " --draft-model " + kShared + "/models/stories260K.gguf", true);
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.out.find("the draft model cannot draft for this model: the vocabularies differ in kind"),
            std::string::npos) << other.out;
  Output none = run("generate -p x -n 2 --spec draft", true);
  EXPECT_NE(none.out.find("--spec draft needs --draft-model FILE"), std::string::npos) << none.out;
  // The target itself (here a copy) is refused; a draft no smaller than the target is warned of.
  const std::string copy = ::testing::TempDir() + "/draft_copy.gguf";
  std::filesystem::copy_file(target, copy, std::filesystem::copy_options::overwrite_existing);
  Output itself = run(gen + " --draft-model " + copy, true);
  EXPECT_EQ(itself.exit_code, 2) << itself.out;
  EXPECT_NE(itself.out.find("is the target model itself"), std::string::npos) << itself.out;
  std::filesystem::remove(copy);
  Output bigger = run("generate -m " + draft + " -p 'The little' -n 4 --draft-model " + target, true);
  EXPECT_EQ(bigger.exit_code, 0) << bigger.out;
  EXPECT_NE(bigger.out.find("warning: the draft model ("), std::string::npos) << bigger.out;
  EXPECT_EQ(report.out.find("warning: the draft model ("), std::string::npos) << report.out;
  Output both = run("generate -p x -n 2 --spec ngram --draft-model " + draft, true);
  EXPECT_NE(both.out.find("one proposer at a time"), std::string::npos) << both.out;
  // Settings of a proposer that is off are refused, not ignored; a draft file that cannot be
  // read is a bad file (1), not a bad command line.
  // Given at its default value too (it was taken then).
  for (const std::string flags : {" --spec-ngram-min 3", " --spec-ngram-max 4"}) {
    Output lookup_off = run("generate -p x -n 2 --draft-model " + draft + flags, true);
    EXPECT_EQ(lookup_off.exit_code, 2) << flags;
    EXPECT_NE(lookup_off.out.find("set prompt lookup, which is off here"), std::string::npos) << lookup_off.out;
  }
  for (const std::string size : {"1MiB", "auto"}) {
    Output no_draft = run("generate -p x -n 2 --draft-kv-cache-memory " + size, true);
    EXPECT_EQ(no_draft.exit_code, 2) << size;
    EXPECT_NE(no_draft.out.find("give --draft-model FILE"), std::string::npos) << no_draft.out;
  }
  Output missing = run("generate -p x -n 2 --draft-model /no/such/draft.gguf", true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("--draft-model: "), std::string::npos) << missing.out;
}

// sluice pair over the quantized family: a table, the JSON report and the chart; usage errors.
TEST(Cli, PairRanksDraftsAndWritesItsReports) {
  const std::string q = kShared + "/models/quant/llama-d256-s21-";
  const std::string json = ::testing::TempDir() + "/pair.json", svg = ::testing::TempDir() + "/pair.svg";
  Output o = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf --draft " + q + "Q2_K.gguf --draft " +
                 kShared + "/models/stories260K.gguf --ngram -p 'The quick brown fox' -p 'Once upon a time' " +
                 "--max-tokens 16 --spec-tokens 3 --batch-sizes 1,4 --confirm 4 --json " + json + " --svg " + svg);
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
    // --confirm 4 reaches every candidate, but one predicted to save nothing (k = 0 at batch 1:
    // Q2_K's and the n-gram's here) has no configuration to confirm.
    if (c.contains("best_k")) {
      EXPECT_EQ(c.contains("confirmed"), c["best_k"][0].get<int>() > 0) << c.dump();
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
  // Through a symbolic link to a file not made yet: the chart would be written over the JSON.
  const std::string link = ::testing::TempDir() + "/pair_link.svg";
  std::filesystem::remove(link);
  std::filesystem::create_symlink("pair_new.json", link);
  Output linked = run(
      "pair --target " + q + "F32.gguf --ngram -p x --json " + ::testing::TempDir() + "/pair_new.json --svg " + link,
      true);
  std::filesystem::remove(link);
  EXPECT_EQ(linked.exit_code, 2);
  EXPECT_NE(linked.out.find("--json and --svg name the same file"), std::string::npos) << linked.out;
  Output twice = run("pair --target " + q + "F32.gguf --ngram -p x --batch-sizes 1,4,1", true);
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.out.find("--batch-sizes lists a size twice"), std::string::npos) << twice.out;
  Output template_alone = run("pair --target " + q + "F32.gguf --ngram -p x --chat-template " + q + "F32.gguf", true);
  EXPECT_EQ(template_alone.exit_code, 2);
  EXPECT_NE(template_alone.out.find("--chat-template requires --suite"), std::string::npos) << template_alone.out;
  Output dup = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf --draft /" + q + "Q8_0.gguf -p x", true);
  EXPECT_EQ(dup.exit_code, 2);
  EXPECT_NE(dup.out.find("--draft names /" + q + "Q8_0.gguf twice"), std::string::npos) << dup.out;
  // Every candidate refused: said before the target is measured, exit 2.
  Output none_left = run("pair --target " + q + "F32.gguf --draft " + kShared + "/models/stories260K.gguf -p x", true);
  EXPECT_EQ(none_left.exit_code, 2);
  EXPECT_NE(none_left.out.find("no candidate can draft for this target:"), std::string::npos) << none_left.out;
  EXPECT_NE(none_left.out.find("stories260K.gguf: the vocabularies differ in kind"), std::string::npos)
      << none_left.out;
  EXPECT_EQ(none_left.out.find("step costs"), std::string::npos) << none_left.out;
  // The target as its own draft, by its path or as a copy under another name: refused, not
  // ranked on noise; the target's step costs reported.
  const std::string copy = ::testing::TempDir() + "/target_copy.gguf";
  std::filesystem::copy_file(q + "F32.gguf", copy, std::filesystem::copy_options::overwrite_existing);
  Output self = run("pair --target " + q + "F32.gguf --draft " + q + "F32.gguf --draft " + copy +
                    " --ngram -p x --max-tokens 4 --spec-tokens 2 --batch-sizes 1,2 --confirm 0 --json " + json);
  ASSERT_EQ(self.exit_code, 0) << self.out;
  const auto self_report = nlohmann::json::parse(std::ifstream(json), nullptr, false);
  ASSERT_EQ(self_report["candidates"].size(), 3u);
  for (int i : {1, 2}) {  // after the n-gram candidate, the refused ones in the order given
    EXPECT_EQ(self_report["candidates"][i]["name"], i == 1 ? q + "F32.gguf" : copy);
    EXPECT_EQ(self_report["candidates"][i]["kind"], "draft_model");
    EXPECT_EQ(self_report["candidates"][i]["refused"].get<std::string>().find("the target itself"), 0u);
  }
  ASSERT_EQ(self_report["target_step_seconds"].size(), 2u);
  EXPECT_EQ(self_report["target_step_seconds"][1].size(), 3u);  // k + 1 = 1..3 tokens
  EXPECT_GT(self_report["target_step_seconds"][1][2].get<double>(), 0);
  // Prompt lookup's settings without prompt lookup were ignored; generate and serve refuse them.
  for (const std::string flags : {" --ngram-min 3 --ngram-max 3", " --ngram-min 2"}) {  // the default too
    Output lookup_off = run("pair --target " + q + "F32.gguf --draft " + q + "Q8_0.gguf -p x" + flags, true);
    EXPECT_EQ(lookup_off.exit_code, 2) << flags;
    EXPECT_NE(lookup_off.out.find("--ngram-min and --ngram-max set prompt lookup, which is not a candidate here"),
              std::string::npos)
        << lookup_off.out;
  }
  Output empty = run("pair --target " + q + "F32.gguf --ngram -p x -p ''", true);
  EXPECT_EQ(empty.exit_code, 2) << empty.out;  // a flag's value: checked before the model loads
  EXPECT_NE(empty.out.find("a prompt must not be empty"), std::string::npos) << empty.out;
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
