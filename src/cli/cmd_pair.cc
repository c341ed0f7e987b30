// sluice pair: ranks candidate drafts for a target on the user's prompts (src/pair/pair.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/chat_template_option.h"
#include "cli/commands.h"
#include "common/thread_pool.h"
#include "engine/spec/draft_model_proposer.h"
#include "eval/render.h"
#include "eval/suite.h"
#include "model/loader.h"
#include "pair/pair.h"
#include "pair/report.h"

namespace sluice::cli {
namespace {

struct PairCliOptions {
  std::string target;
  std::vector<std::string> drafts;
  bool ngram = false;
  int32_t ngram_min = 2, ngram_max = 4;
  bool ngram_given = false;  // --ngram-min or --ngram-max, even at its default
  std::string prompts_file;
  std::vector<std::string> prompts;
  std::string suite_file;      // an eval suite: its tests' prompts
  std::string chat_template_file;
  pair::PairOptions pair;
  int32_t confirm = 2;
  std::string json_file, svg_file;
  int threads = 0;
};

struct SuitePrompt {
  std::string text;
  bool chat = false;  // rendered by the chat template
};

// Every test's prompt of an eval suite (each prompt template over each test's vars), chat ones
// rendered by the target's chat template with the generation prompt. Likelihood tasks score
// texts rather than generate, so they give no prompt here (said on stderr).
Result<std::vector<SuitePrompt>> suite_prompts(const std::string& path, const LoadedModel& target,
                                               const std::string& template_file) {
  SLUICE_ASSIGN_OR_RETURN(const eval::Suite suite, eval::load_suite(path));
  std::optional<ChosenChatTemplate> chat;
  std::vector<SuitePrompt> out;
  const Tokenizer& tok = *target.tokenizer;
  auto token_text = [&](int32_t id) { return id >= 0 && id < tok.vocab_size() ? tok.token_text(id) : std::string(); };
  for (const eval::TestCase& test : suite.tests) {
    for (const eval::Prompt& prompt : suite.prompts) {
      SLUICE_ASSIGN_OR_RETURN(const eval::RenderedPrompt r, eval::render_prompt(prompt, test.vars));
      if (r.messages.is_null()) {
        out.push_back({r.text, false});
        continue;
      }
      if (!chat) {
        SLUICE_ASSIGN_OR_RETURN(ChosenChatTemplate chosen, choose_chat_template(target.model->file(), template_file,
                                                                                "the suite's chat prompts use"));
        chat = std::move(chosen);
      }
      const eval::Json context = chat::template_context<eval::Json>(r.messages, nullptr, eval::Json::object(), true,
                                                                    token_text(tok.bos_id()), token_text(tok.eos_id()));
      auto text = chat->chat_template.render(context);
      if (!text) return Error(text.error().with_context(fmt::format("test '{}'", test.description)));
      out.push_back({std::move(*text), true});
    }
  }
  size_t num_likelihood = 0;
  for (const eval::LikelihoodTask& t : suite.likelihood) num_likelihood += t.items.size();
  if (num_likelihood > 0) {
    std::cerr << fmt::format("--suite: {} likelihood items skipped (they score texts; pair needs prompts to "
                             "generate from)\n", num_likelihood);
  }
  if (out.empty()) return Error(StatusCode::kInvalid, "the suite has no test with a prompt");
  return out;
}

int run_pair(PairCliOptions& o) {
  if (o.drafts.empty() && !o.ngram) return fail_usage("give at least one candidate: --draft FILE or --ngram");
  if (!o.prompts.empty() + !o.prompts_file.empty() + !o.suite_file.empty() != 1) {
    return fail_usage("give the prompts one way: --prompts FILE, -p TEXT or --suite FILE");
  }
  if (!o.ngram && o.ngram_given) {
    return fail_usage("--ngram-min and --ngram-max set prompt lookup, which is not a candidate here: add --ngram");
  }
  if (o.ngram_min > o.ngram_max) return fail_usage("--ngram-min must not exceed --ngram-max");
  // The report files were checked with the flags (output_file), not after minutes of measuring.
  if (!o.json_file.empty() && same_file(o.json_file, o.svg_file)) {
    return fail_usage("--json and --svg name the same file (the chart would overwrite the JSON)");
  }
  if (std::ranges::any_of(o.pair.batch_sizes, [&](int b) { return std::ranges::count(o.pair.batch_sizes, b) > 1; })) {
    return fail_usage("--batch-sizes lists a size twice");
  }
  for (size_t i = 0; i < o.drafts.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (same_file(o.drafts[j], o.drafts[i])) return fail_usage(fmt::format("--draft names {} twice", o.drafts[i]));
    }
  }
  std::vector<std::string> texts = o.prompts;
  if (!o.prompts_file.empty()) {
    auto p = read_prompts(o.prompts_file);
    if (!p) return fail(p.error().message());
    texts.clear();
    for (FilePrompt& fp : *p) texts.push_back(std::move(fp.text));
  }
  auto target = load_model(o.target, terminal_progress("loading " + o.target));
  if (!target) return fail(fmt::format("--target: {}", target.error().message()));
  // How each text becomes tokens: --prompts and -p as `sluice generate` encodes; a suite's as
  // `sluice serve` would (completions: BOS added, special tokens parsed; chat: the rendered
  // template as it is, special tokens parsed).
  std::vector<EncodeOptions> encoding(texts.size());
  if (!o.suite_file.empty()) {
    auto p = suite_prompts(o.suite_file, *target, o.chat_template_file);
    if (!p) return fail(fmt::format("--suite {}: {}", o.suite_file, p.error().message()));
    for (SuitePrompt& sp : *p) {
      texts.push_back(std::move(sp.text));
      encoding.push_back({.add_bos = !sp.chat, .parse_special = true});
    }
    std::cerr << fmt::format("--suite {}: {} prompts\n", o.suite_file, texts.size());
  }
  std::vector<std::vector<int32_t>> prompts;
  int32_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    // Prompts are counted from 1, as a file's lines are.
    if (texts[i].empty()) return fail(fmt::format("prompt {} is empty", i + 1));
    auto ids = target->tokenizer->encode(texts[i], encoding[i]);
    if (!ids) return fail(fmt::format("prompt {}: {}", i + 1, ids.error().message()));
    if (static_cast<int64_t>(ids->size()) + o.pair.max_tokens + o.pair.max_k >= target->model->config().context_length) {
      return fail(fmt::format("prompt {} has {} tokens: with --max-tokens {} it does not fit the target's context of {}",
                              i + 1, ids->size(), o.pair.max_tokens, target->model->config().context_length));
    }
    longest = std::max(longest, static_cast<int32_t>(ids->size()));
    prompts.push_back(std::move(*ids));
  }
  std::vector<LoadedModel> drafts;
  std::vector<pair::Candidate> candidates;
  for (const std::string& path : o.drafts) {
    if (same_file(path, o.target) || same_bytes(path, o.target)) {
      drafts.push_back({});  // not loaded again: the target's own model stands in
      continue;
    }
    auto d = load_model(path, terminal_progress("loading " + path));
    if (!d) return fail(fmt::format("--draft {}: {}", path, d.error().message()));
    drafts.push_back(std::move(*d));
  }
  for (size_t i = 0; i < drafts.size(); ++i) {
    if (!drafts[i].model) {
      // Its acceptance is 1, but each draft step costs a target step: noise could rank it first.
      candidates.push_back({.name = o.drafts[i], .model = target->model.get(), .tokenizer = target->tokenizer.get(),
                            .refused = "the target itself: a draft step as costly as the target's saves nothing"});
      continue;
    }
    candidates.push_back({.name = o.drafts[i], .model = drafts[i].model.get(), .tokenizer = drafts[i].tokenizer.get()});
  }
  // A draft whose vocabulary is not the target's can never draft for it: refused now, and when
  // no candidate is left, before minutes of measuring the target.
  std::string refusals;
  for (pair::Candidate& c : candidates) {
    if (c.refused.empty()) {
      if (Status s = spec::check_draft_vocabulary(*target->tokenizer, *c.tokenizer); !s) c.refused = s.message();
    }
    refusals += fmt::format("\n  {}: {}", c.name, c.refused);
  }
  if (o.ngram) candidates.push_back({.name = "ngram", .ngram_min = o.ngram_min, .ngram_max = o.ngram_max});
  if (std::ranges::all_of(candidates, [](const pair::Candidate& c) { return !c.refused.empty(); })) {
    return fail_usage("no candidate can draft for this target:" + refusals);
  }

  ThreadPool pool(o.threads);
  std::cerr << fmt::format("target {}: {} prompts, {} output tokens each, {}\n", o.target, prompts.size(),
                           o.pair.max_tokens,
                           o.pair.temperature > 0 ? fmt::format("temperature {}", o.pair.temperature) : "greedy");
  std::cerr << "the target's outputs...\n";
  auto outputs = pair::target_outputs(*target->model, *target->tokenizer, pool, prompts, o.pair);
  if (!outputs) return fail(outputs.error().message());
  const int32_t context = longest + o.pair.max_tokens / 2;  // the middle of an output, for step costs
  std::cerr << "step costs of the target at batch sizes...\n";
  const pair::TargetCosts costs = pair::measure_target_costs(*target->model, pool, context, o.pair);
  for (pair::Candidate& c : candidates) {
    if (!c.refused.empty()) continue;
    std::cerr << "candidate " << c.name << "...\n";
    pair::measure_acceptance(*target->model, *target->tokenizer, pool, prompts, *outputs, o.pair, c);
    if (!c.refused.empty()) continue;
    pair::measure_draft_costs(pool, context, o.pair, c);
    pair::predict_speedup(costs, o.pair, c);
  }
  pair::rank(candidates);
  for (int32_t i = 0; i < o.confirm && i < static_cast<int32_t>(candidates.size()); ++i) {
    if (!candidates[i].refused.empty()) break;
    // Predicted to save nothing (best k 0): no configuration to confirm (and ranked after
    // every one that has one).
    if (candidates[i].best_k.empty() || candidates[i].best_k[0] == 0) break;
    std::cerr << "confirming " << candidates[i].name << " end to end...\n";
    if (Status s = pair::confirm(*target->model, *target->tokenizer, pool, prompts, o.pair, candidates[i]); !s) {
      return fail(s.message());
    }
  }
  pair::rank(candidates);  // again: the confirmed ones by what was measured
  std::printf("%s", pair::render_table(candidates, o.pair).c_str());
  std::printf("accept: the draft token's acceptance by sluice's rule, mean over positions; min(p,q): by the rule with "
              "the draft's whole distribution; Aj: the chance that the first j drafts of a step are accepted; "
              "speedup: predicted, at the best k, from the step costs measured here; confirmed: tokens/s with / "
              "without speculation, end to end\n");
  const std::string flags = pair::serve_flags(candidates, o.target);
  if (flags.empty()) {
    std::printf("no candidate speeds up decoding at batch size %d here\n", o.pair.batch_sizes.at(0));
  } else {
    std::printf("winner: %s\n", flags.c_str());
  }
  for (const pair::Candidate& c : candidates) {
    if (c.outputs_identical && !*c.outputs_identical) return fail("the confirmation of " + c.name + " changed the output");
  }
  if (!o.json_file.empty()) {
    std::ofstream out(o.json_file);
    out << pair::to_json(candidates, costs, o.pair, o.target, static_cast<int64_t>(prompts.size())).dump(2) << "\n";
    if (!out) return fail("cannot write --json " + o.json_file);
  }
  if (!o.svg_file.empty()) {
    std::ofstream out(o.svg_file);
    out << pair::render_svg(candidates, o.pair, o.target);
    if (!out) return fail("cannot write --svg " + o.svg_file);
  }
  return finish_stdout();
}

}  // namespace

CommandFn add_pair_command(CLI::App& app) {
  auto o = std::make_shared<PairCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "pair", "Rank draft models (and prompt lookup) for a target on your prompts: vocabulary check, acceptance "
              "by draft position from both models' distributions, step costs measured here, predicted speedup per "
              "batch size, and a confirmation run");
  cmd->add_option("--target", o->target, "The target model (GGUF)")->required();
  cmd->add_option("--draft", o->drafts, "A candidate draft model (GGUF); repeatable");
  cmd->add_flag("--ngram", o->ngram, "Also rank prompt lookup (--spec ngram)");
  const auto given = [o](const std::string&) { o->ngram_given = true; };
  cmd->add_option("--ngram-min", o->ngram_min, "Prompt lookup: shortest suffix matched")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->each(given);
  cmd->add_option("--ngram-max", o->ngram_max, "Prompt lookup: longest suffix matched")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->each(given);
  cmd->add_option("--prompts", o->prompts_file, "Prompts, one per line (a line starting with '\"' is a JSON string)");
  cmd->add_option("-p,--prompt", o->prompts, "A prompt; repeatable")
      ->check(non_empty("TEXT", "a prompt"));
  cmd->add_option("--suite", o->suite_file,
                  "An eval suite (sluice eval's YAML or promptfoo's): every test's prompt, rendered over its vars; "
                  "chat prompts through the target's chat template")
      ->check(CLI::ExistingFile);
  auto* suite = cmd->get_option("--suite");
  cmd->add_option("--chat-template", o->chat_template_file,
                  "With --suite: the Jinja chat template for chat prompts, instead of the target's own")
      ->check(CLI::ExistingFile)->needs(suite);
  cmd->add_option("--temperature", o->pair.temperature, "The temperature you serve at (0: greedy)")
      ->capture_default_str()
      ->check(number_in(0.0, 2.0));
  cmd->add_option("--max-tokens", o->pair.max_tokens, "Output tokens of the target per prompt, along which acceptance is measured")
      ->capture_default_str()->check(CLI::Range(2, 4096));
  cmd->add_option("--spec-tokens", o->pair.max_k, "The most drafts per step considered")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--batch-sizes", o->pair.batch_sizes, "Batch sizes at which step costs are measured and speedups predicted")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--confirm", o->confirm, "Confirm the best N candidates end to end (0: none)")
      ->capture_default_str()->check(CLI::Range(0, 64));
  cmd->add_option("--seed", o->pair.seed, "Seed of the target's sampled outputs (temperature > 0)")->check(seed_validator())->capture_default_str();
  cmd->add_option("--json", o->json_file, "Write the whole report as JSON")->check(output_file());
  cmd->add_option("--svg", o->svg_file, "Write a chart: acceptance by draft position, predicted speedup by batch size")
      ->check(output_file());
  cmd->add_option("-t,--threads", o->threads, "Compute threads (0..256); 0 = one per core")
      ->capture_default_str()->check(CLI::Range(0, 256));
  return [o] { return run_pair(*o); };
}

}  // namespace sluice::cli
