// The sampler's cost per token over a vocabulary of --vocab logits (Qwen2.5's 151,936 by
// default), for each way it is used: greedy, temperature, top-k, top-p, penalties, top
// logprobs, and pick() (a draft model's copy). Logits: uniform in [-4, 4] with two peaks.
// Then JSON mode (response_format json_object): the cost of one token mask over the
// vocabulary (a new grammar state) and of a constrained token when masks come from the memo,
// on synthetic token texts (1-8 characters: letters, spaces, digits and JSON punctuation).
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/json_constraint.h"
#include "engine/sampler.h"

int main(int argc, char** argv) {
  CLI::App app("sampler_bench: milliseconds per sampled token");
  int32_t vocab = 151936, draws = 200;
  app.add_option("--vocab", vocab, "Logits per row")->check(CLI::Range(2, 1 << 22));
  app.add_option("--draws", draws, "Tokens sampled per case")->check(CLI::Range(1, 1 << 20));
  CLI11_PARSE(app, argc, argv);
  using sluice::SamplingParams;
  sluice::Xoshiro256 rng(1);
  std::vector<float> logits(vocab);
  for (float& z : logits) z = static_cast<float>(rng.next_double() * 8 - 4);
  logits[17] = 12;
  logits[vocab / 2] = 11;
  struct Case {
    const char* name;
    SamplingParams params;
  };
  auto with = [](float t, auto&& set) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 3;
    set(p);
    return p;
  };
  const Case cases[] = {
      {"greedy", with(0, [](SamplingParams&) {})},
      {"greedy, top_logprobs 5", with(0, [](SamplingParams& p) { p.top_logprobs = 5; })},
      {"temperature 1", with(1, [](SamplingParams&) {})},
      {"temperature 0.7, top_k 40", with(0.7f, [](SamplingParams& p) { p.top_k = 40; })},
      {"temperature 0.7, top_p 0.9", with(0.7f, [](SamplingParams& p) { p.top_p = 0.9f; })},
      {"temperature 1, penalties", with(1, [](SamplingParams& p) {
         p.repetition_penalty = 1.1f;
         p.frequency_penalty = 0.3f;
       })},
  };
  const std::vector<int32_t> prompt = {1, 2, 3, 17, 99, 1000};
  std::printf("%-28s %12s %12s\n", "case", "sample ms", "pick ms");
  for (const Case& c : cases) {
    sluice::Sampler sampler(c.params, prompt);
    long checksum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < draws; ++i) {
      const int32_t token = sampler.sample(logits).token_id;
      checksum += token;
      sampler.accept(token);
    }
    const auto t1 = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < draws; ++i) checksum += sampler.pick(logits);
    const auto t2 = std::chrono::steady_clock::now();
    auto ms = [&](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count() / draws; };
    std::printf("%-28s %12.3f %12.3f   (%ld)\n", c.name, ms(t0, t1), ms(t1, t2), checksum % 1000);
  }

  // JSON mode.
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz      0123456789{}[]\":,.-\n";
  std::vector<std::string> pieces(static_cast<size_t>(vocab));
  for (std::string& piece : pieces) {
    const size_t n = 1 + rng.next() % 8;
    for (size_t i = 0; i < n; ++i) piece += alphabet[rng.next() % alphabet.size()];
  }
  auto json_vocab = std::make_shared<sluice::JsonVocabulary>(pieces);
  // Distinct states: inside a string value, at growing depths (each one a memo miss).
  const int num_states = 20;
  const auto m0 = std::chrono::steady_clock::now();
  long allowed = 0;
  for (int d = 0; d < num_states; ++d) {
    sluice::JsonState state;
    state.feed("{\"k\":");
    for (int i = 0; i < d; ++i) state.feed("[");
    state.feed("\"");
    const auto mask = json_vocab->mask(state);
    for (uint64_t word : *mask) allowed += __builtin_popcountll(word);
  }
  const auto m1 = std::chrono::steady_clock::now();
  std::printf("%-28s %12.3f   (%.1f%% of the vocabulary allowed in a string)\n", "json: one new mask",
              std::chrono::duration<double, std::milli>(m1 - m0).count() / num_states,
              100.0 * static_cast<double>(allowed) / num_states / vocab);
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 3;
    sluice::Sampler sampler(p, prompt);
    sluice::JsonConstraint constraint(json_vocab);
    sampler.constrain(constraint);
    // Warm: the states this run visits get their masks once; then the timed run meets them again.
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < draws; ++i) {
      const int32_t token = sampler.sample(logits).token_id;
      tokens.push_back(token);
      sampler.accept(token);
    }
    sluice::Sampler again(p, prompt);
    again.constrain(constraint);
    const auto t0 = std::chrono::steady_clock::now();
    long checksum = 0;
    for (int32_t i = 0; i < draws; ++i) {
      const int32_t token = again.sample(logits).token_id;
      checksum += token;
      again.accept(token);
    }
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("%-28s %12.3f   (%ld)\n", temperature == 0 ? "json: greedy, memo warm" : "json: temperature 1, memo warm",
                std::chrono::duration<double, std::milli>(t1 - t0).count() / draws, checksum % 1000);
  }
}
