// sluice generate: one-shot generation from the command line, on the same model code as the server.
#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/thread_pool.h"
#include "engine/generator.h"
#include "model/loader.h"

namespace sluice::cli {
namespace {

struct GenerateOptions {
  std::string model = "demo";
  std::string prompt;
  std::string seed = "0";
  bool prompt_from_stdin = false;
  int32_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  bool json = false;
  int32_t logprobs = 0;
  int threads = 0;
  int32_t prefill_chunk = 512;
  bool no_bos = false;
  bool special = false;
};

nlohmann::json sample_json(const Tokenizer& tok, const SampleResult& s) {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& t : s.top) {
    top.push_back({{"token", t.token_id}, {"text", tok.token_to_piece(t.token_id, true)}, {"logprob", t.logprob}});
  }
  const std::string piece = tok.token_to_piece(s.token_id, true);
  // "bytes" keeps what "text" cannot show: a token that is part of a multi-byte character.
  return {{"token", s.token_id}, {"text", piece}, {"bytes", std::vector<uint8_t>(piece.begin(), piece.end())},
          {"logprob", s.logprob}, {"top_logprobs", top}};
}

// Sampling errors name the API fields (top_p); on the command line, name the flags (--top-p).
std::string with_flag_names(std::string message) {
  static const std::pair<std::string_view, std::string_view> kFlags[] = {
      {"temperature", "--temp"}, {"top_k", "--top-k"}, {"top_p", "--top-p"}, {"min_p", "--min-p"},
      {"repetition_penalty", "--repeat-penalty"}, {"presence_penalty", "--presence-penalty"},
      {"frequency_penalty", "--frequency-penalty"}, {"top_logprobs", "--logprobs"}};
  for (const auto& [field, flag] : kFlags) {
    if (message.starts_with(field) && message.size() > field.size() && message[field.size()] == ' ') {
      return std::string(flag) + message.substr(field.size());
    }
  }
  return message;
}

Result<uint64_t> parse_seed(const std::string& s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Error("--seed must be an integer in 0..18446744073709551615, got '{}'", s);
  }
  return v;
}

int run(const GenerateOptions& o) {
  SamplingParams sampling = o.sampling;
  sampling.top_logprobs = o.logprobs;
  auto seed = parse_seed(o.seed);
  if (!seed) return fail(seed.error().message());
  sampling.seed = *seed;
  if (Status s = sampling.validate(); !s) return fail(with_flag_names(s.message()));
  std::string prompt = o.prompt;
  if (o.prompt_from_stdin) {
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto loaded = load_model(o.model, terminal_progress("loading " + o.model));
  if (!loaded) return fail(loaded.error().message());
  if (loaded->is_demo && !o.json) {
    std::cerr << "note: the demo model has random weights; its output is gibberish. Pass -m FILE.gguf for a real model.\n";
  }
  const Tokenizer& tok = *loaded->tokenizer;
  auto tokens = tok.encode(prompt, {.add_bos = !o.no_bos, .parse_special = o.special});
  if (!tokens) return fail("prompt: " + tokens.error().message());

  GenerateRequest req;
  req.prompt_tokens = *tokens;
  req.sampling = sampling;
  req.max_tokens = o.max_tokens;
  req.stop_strings = o.stop;
  req.stop_token_ids = o.stop_ids;
  req.ignore_eos = o.ignore_eos;

  ThreadPool pool(o.threads);
  Generator gen(*loaded->model, tok, pool, o.prefill_chunk);
  auto on_text = [&](std::string_view text) {
    if (o.json) return;
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  auto result = gen.generate(req, on_text);
  if (!result) return fail(result.error().message());

  const auto num_out = static_cast<int64_t>(result->output_tokens.size());
  const double prefill_tps = result->prefill_seconds > 0 ? req.prompt_tokens.size() / result->prefill_seconds : 0;
  const double decode_tps = result->decode_seconds > 0 ? num_out / result->decode_seconds : 0;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},
                        {"prompt", prompt},
                        {"prompt_tokens", req.prompt_tokens},
                        {"tokens", result->output_tokens},
                        {"text", result->text},
                        {"finish_reason", finish_reason_name(result->finish_reason)},
                        {"timings", {{"prefill_seconds", result->prefill_seconds},
                                     {"decode_seconds", result->decode_seconds},
                                     {"prefill_tokens_per_second", prefill_tps},
                                     {"decode_tokens_per_second", decode_tps}}}};
    if (!result->stop_matched.empty()) j["stop"] = result->stop_matched;
    if (o.logprobs > 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& s : result->samples) lp.push_back(sample_json(tok, s));
      j["logprobs"] = lp;
    }
    const std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt tokens: %zu, generated tokens: %lld (%s), prefill: %.1f tok/s, decode: %.1f tok/s\n",
                 req.prompt_tokens.size(), static_cast<long long>(num_out),
                 std::string(finish_reason_name(result->finish_reason)).c_str(), prefill_tps, decode_tps);
  }
  return finish_stdout();
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout, summary on stderr)");
  cmd->add_option("-m,--model", o->model, "GGUF model file, or 'demo' for the built-in random-weight demo model")
      ->capture_default_str();
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_flag("--stdin", o->prompt_from_stdin, "Read the prompt from standard input")->excludes(prompt);
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Maximum number of tokens to generate")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--temp,--temperature", o->sampling.temperature, "Sampling temperature in [0, 2]; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the K most likely tokens (K >= 0); 0 = off")
      ->capture_default_str();
  cmd->add_option("--top-p", o->sampling.top_p,
                  "Nucleus sampling, P in (0, 1]: keep the smallest set with mass >= P; 1 = off")
      ->capture_default_str();
  cmd->add_option("--min-p", o->sampling.min_p, "Drop tokens below P times the top probability, P in [0, 1]; 0 = off")
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", o->sampling.repetition_penalty,
                  "Repetition penalty (> 0) on tokens of prompt and output; 1 = off")->capture_default_str();
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "OpenAI presence penalty in [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "OpenAI frequency penalty in [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed (0..2^64-1); the same seed gives the same output")
      ->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop string (repeatable); it is not printed");
  cmd->add_option("--stop-token", o->stop_ids, "Stop token id (repeatable), besides the model's end tokens");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  auto* json = cmd->add_flag("--json", o->json,
                             "Print one JSON object (prompt and generated token ids, text) instead of streaming");
  cmd->add_option("--logprobs", o->logprobs, "With --json: the top-N (0..20) log-probabilities of each generated token")
      ->check(CLI::Range(0, 20))->needs(json);
  cmd->add_option("-t,--threads", o->threads, "Compute threads (0..256); 0 = one per core")
      ->capture_default_str()->check(CLI::Range(0, 256));
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per forward pass")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token the vocabulary asks for");
  cmd->add_flag("--special", o->special, "Parse special tokens such as <|im_start|> in the prompt");
  return [o, prompt] {
    if (prompt->count() == 0 && !o->prompt_from_stdin) {
      std::cerr << "sluice generate: error: give a prompt with -p TEXT or --stdin (see sluice generate --help)\n";
      return kExitUsage;
    }
    return run(*o);
  };
}

}  // namespace sluice::cli
