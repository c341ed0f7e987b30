// sluice generate: generation from the command line on the serving engine: one prompt streamed
// to stdout, or many prompts (a file, or copies of one) run concurrently with continuous batching.
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/thread_pool.h"
#include "common/utf8.h"
#include "cli/engine_options.h"
#include "kernels/kernel_path.h"
#include "engine/engine.h"
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
  bool no_bos = false;
  bool special = false;
  std::string prompts_file;
  int32_t parallel = 0;
  EngineOptions engine;
};

nlohmann::json token_json(const Tokenizer& tok, const TokenOutput& s) {
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

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "off", "ngram" or "draft" (--draft-model alone turns drafting on, as EngineOptions does).
std::string spec_method(const GenerateOptions& o) {
  if (!o.engine.spec.empty()) return o.engine.spec;
  return o.engine.draft_model.empty() ? "off" : "draft";
}

// `line`: the --prompts file's line of the prompt, 0 when it did not come from a file.
nlohmann::json result_json(const GenerateOptions& o, const Tokenizer& tok, const std::string& prompt, int line,
                           const Request& req, const StreamOutput& r) {
  std::vector<int32_t> ids;
  for (const auto& t : r.tokens) ids.push_back(t.token_id);
  const RequestMetrics& m = r.metrics;
  nlohmann::json j = {{"model", o.model},
                      {"prompt", prompt},
                      {"prompt_tokens", req.prompt_tokens},
                      {"tokens", ids},
                      {"text", r.text},
                      {"finish_reason", finish_reason_name(r.finish_reason)},
                      {"cached_tokens", m.cached_tokens},
                      {"timings", {{"queue_seconds", m.queue_seconds},
                                   {"time_to_first_token_seconds", m.ttft_seconds},
                                   {"time_per_output_token_seconds", m.tpot_seconds},
                                   {"total_seconds", m.e2e_seconds}}}};
  if (line > 0) j["line"] = line;
  if (spec_method(o) != "off") {
    j["speculation"] = {{"draft_tokens", m.num_draft_tokens}, {"accepted_tokens", m.num_accepted_tokens}};
  }
  if (!r.stop_matched.empty()) j["stop"] = r.stop_matched;
  if (!r.error.empty()) j["error"] = r.error;
  if (o.logprobs > 0) {
    nlohmann::json lp = nlohmann::json::array();
    for (const auto& t : r.tokens) lp.push_back(token_json(tok, t));
    j["logprobs"] = lp;
  }
  return j;
}

// The speculation line on stderr, whenever speculation is on, with nothing drafted too (an
// n-gram lookup that found no repeat, adaptive drafting that chose none, too few tokens left).
void print_speculation(const GenerateOptions& o, int64_t drafted, int64_t accepted) {
  const std::string method = spec_method(o);
  if (method == "off") return;
  if (drafted == 0) {
    std::fprintf(stderr, "speculative decoding (%s): no draft tokens verified\n", method.c_str());
    return;
  }
  std::fprintf(stderr, "speculative decoding (%s): %lld of %lld draft tokens accepted (%.0f%%)\n", method.c_str(),
               static_cast<long long>(accepted), static_cast<long long>(drafted),
               100.0 * static_cast<double>(accepted) / static_cast<double>(drafted));
}

int write_stdout(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  return std::ferror(stdout) ? kExitError : kExitOk;
}

// One prompt, streamed as it is generated.
int run_one(const GenerateOptions& o, Engine& engine, const Tokenizer& tok, const std::string& prompt, int line,
            Request req) {
  auto h = engine.submit(req);
  if (!h) return fail(h.error().message());
  StreamOutput all;
  for (;;) {
    StreamOutput part = h->next();
    if (!o.json) {
      std::fwrite(part.text.data(), 1, part.text.size(), stdout);
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        // The reader is gone (a closed pipe, a full disk): stop generating for it now.
        h->cancel();
        return fail("cannot write to standard output");
      }
    }
    all.tokens.insert(all.tokens.end(), part.tokens.begin(), part.tokens.end());
    all.text += part.text;
    if (part.finished) {
      part.tokens = std::move(all.tokens);
      part.text = std::move(all.text);
      all = std::move(part);
      break;
    }
  }
  if (all.finish_reason == FinishReason::kError) return fail(all.error);
  const RequestMetrics& m = all.metrics;
  const double prefill_tps = m.ttft_seconds > 0 ? m.num_prompt_tokens / m.ttft_seconds : 0;
  const double decode_tps = m.tpot_seconds > 0 ? 1.0 / m.tpot_seconds : 0;
  if (o.json) {
    write_stdout(result_json(o, tok, prompt, line, req, all).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                 "\n");
  } else {
    std::printf("\n");
    std::fflush(stdout);
    std::fprintf(stderr, "prompt tokens: %d, generated tokens: %d (%s), prefill: %.1f tok/s, decode: %.1f tok/s\n",
                 m.num_prompt_tokens, m.num_output_tokens, std::string(finish_reason_name(all.finish_reason)).c_str(),
                 prefill_tps, decode_tps);
    print_speculation(o, m.num_draft_tokens, m.num_accepted_tokens);
  }
  return finish_stdout();
}

// Many prompts, at most `parallel` in flight; results printed in input order.
// `lines`: each prompt's line of the --prompts file, or empty for copies of one prompt.
int run_many(const GenerateOptions& o, Engine& engine, const Tokenizer& tok, const std::vector<std::string>& prompts,
             const std::vector<int>& lines, const std::vector<Request>& reqs, size_t parallel) {
  const bool tty = isatty(STDERR_FILENO);
  const double start = seconds_now();
  // A request the engine refused (a prompt over the context) is reported in its place, as
  // failed, and the others still run; no handle then.
  std::deque<std::pair<size_t, std::optional<RequestHandle>>> in_flight;
  std::vector<StreamOutput> results(reqs.size());
  size_t next = 0, done = 0, failed = 0;
  int64_t out_tokens = 0, draft_tokens = 0, accepted_tokens = 0;
  double sum_ttft = 0, sum_tpot = 0;
  int num_tpot = 0;
  auto print = [&](size_t i) {
    const StreamOutput& r = results[i];
    if (o.json) {
      return write_stdout(result_json(o, tok, prompts[i], lines.empty() ? 0 : lines[i], reqs[i], r).dump(-1, ' ', false,
                                                                          nlohmann::json::error_handler_t::replace) +
                          "\n");
    }
    // A file's prompt is named by its line (blank lines are skipped, so indices would drift).
    const std::string name = lines.empty() ? fmt::format("[{}]", i) : fmt::format("line {}:", lines[i]);
    std::string s = fmt::format("--- {} {} tokens ({}){}\n{}\n", name, r.tokens.size(), finish_reason_name(r.finish_reason),
                                r.error.empty() ? "" : ": " + r.error, r.text);
    return write_stdout(s);
  };
  while (done < reqs.size()) {
    while (next < reqs.size() && in_flight.size() < parallel) {
      auto h = engine.submit(reqs[next]);
      if (!h && h.error().code() == StatusCode::kOverloaded && !in_flight.empty()) {
        break;  // the engine's queue is full: submit more as requests finish (--parallel is a cap)
      }
      if (!h) {
        results[next].finish_reason = FinishReason::kError;
        results[next].error = h.error().message();
        in_flight.emplace_back(next++, std::nullopt);
        continue;
      }
      in_flight.emplace_back(next++, std::move(*h));
    }
    auto [i, h] = std::move(in_flight.front());
    in_flight.pop_front();
    if (h) results[i] = h->wait();
    ++done;
    const RequestMetrics& m = results[i].metrics;
    out_tokens += m.num_output_tokens;
    draft_tokens += m.num_draft_tokens;
    accepted_tokens += m.num_accepted_tokens;
    sum_ttft += m.ttft_seconds;
    if (m.num_output_tokens > 1) sum_tpot += m.tpot_seconds, ++num_tpot;
    failed += results[i].finish_reason == FinishReason::kError;
    if (print(i) != kExitOk) return finish_stdout();
    if (tty) {
      std::fprintf(stderr, "\r%zu/%zu requests, %lld tokens, %.1f tok/s", done, reqs.size(),
                   static_cast<long long>(out_tokens), out_tokens / std::max(1e-9, seconds_now() - start));
      std::fflush(stderr);
    }
  }
  const double wall = seconds_now() - start;
  EngineMetrics em = engine.wait_until_idle();
  if (tty) std::fprintf(stderr, "\n");
  std::fprintf(stderr,
               "requests: %zu (%zu failed), output tokens: %lld in %.2f s = %.1f tok/s; mean time to first token: "
               "%.1f ms, mean time per output token: %.1f ms; mean sequences per step: %.1f; preemptions: %lld; "
               "coalesced: %lld; cached prompt tokens: %lld of %lld\n",
               reqs.size(), failed, static_cast<long long>(out_tokens), wall, out_tokens / std::max(wall, 1e-9),
               1000 * sum_ttft / reqs.size(), num_tpot ? 1000 * sum_tpot / num_tpot : 0.0,
               em.num_steps ? em.seqs_per_step.sum() / em.num_steps : 0.0, static_cast<long long>(em.num_preemptions),
               static_cast<long long>(em.num_requests_coalesced), static_cast<long long>(em.prefix_cache_hit_tokens),
               static_cast<long long>(em.prefix_cache_query_tokens));
  print_speculation(o, draft_tokens, accepted_tokens);
  const int rc = finish_stdout();
  return failed ? kExitError : rc;
}

int run(const GenerateOptions& o) {
  SamplingParams sampling = o.sampling;
  sampling.top_logprobs = o.logprobs;
  auto seed = parse_seed(o.seed);
  if (!seed) return fail_usage(seed.error().message());
  if (Status s = sampling.validate(); !s) return fail_usage(with_flag_names(s.message()));
  std::vector<std::string> prompts;
  std::vector<int> lines;  // the --prompts file's line of each prompt
  if (!o.prompts_file.empty()) {
    auto p = read_prompts(o.prompts_file);
    if (!p) return fail(p.error().message());
    for (FilePrompt& fp : *p) {
      lines.push_back(fp.line);
      prompts.push_back(std::move(fp.text));
    }
  } else {
    std::string prompt = o.prompt;
    if (o.prompt_from_stdin) {
      prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      // The one newline `echo` ends with (as a shell's $(...) drops it): `echo TEXT | ... --stdin`
      // prompts with what -p TEXT does.
      if (prompt.ends_with("\r\n")) prompt.resize(prompt.size() - 2);
      else if (prompt.ends_with('\n')) prompt.pop_back();
    }
    prompts.assign(std::max(1, o.parallel), prompt);
  }
  auto loaded = load_model(o.model, terminal_progress("loading " + o.model));
  if (!loaded) return fail(loaded.error().message());
  if (loaded->is_demo && !o.json) {
    std::cerr << "note: the demo model has random weights; its output is gibberish. Pass -m FILE.gguf for a real model.\n";
  }
  const Tokenizer& tok = *loaded->tokenizer;
  const ModelConfig& mc = loaded->model->config();
  for (int32_t id : o.stop_ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      return fail_usage(fmt::format("--stop-token: stop token id {} is outside the vocabulary (0..{})", id,
                                    tok.vocab_size() - 1));
    }
  }
  std::vector<Request> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto tokens = tok.encode(prompts[i], {.add_bos = !o.no_bos, .parse_special = o.special});
    if (!tokens) {
      return fail(lines.empty() ? fmt::format("prompt: {}", tokens.error().message())
                                : fmt::format("prompts file '{}' line {}: {}", o.prompts_file, lines[i],
                                              tokens.error().message()));
    }
    Request r;
    r.prompt_tokens = std::move(*tokens);
    r.sampling = sampling;
    r.seed = *seed + (o.prompts_file.empty() ? i : 0);  // copies of one prompt: one sample per seed
    r.max_tokens = o.max_tokens;
    r.stop_strings = o.stop;
    r.stop_token_ids = o.stop_ids;
    r.ignore_eos = o.ignore_eos;
    r.logprobs = o.logprobs > 0;
    reqs.push_back(std::move(r));
  }
  auto config = o.engine.to_config(mc, tok);
  if (!config) return fail_config(config.error());
  LoadedModel draft;
  if (Status s = o.engine.attach_draft(*config, draft, o.model); !s) return fail_config(s);
  ThreadPool pool(o.threads);
  auto engine = Engine::create(*loaded->model, tok, pool, *config);
  if (!engine) return fail_config(engine.error());
  if (!o.json) {
    std::cerr << describe_kv_cache(**engine, mc) << "\n" << describe_kernels(*loaded->model) << "\n"
              << describe_spec(**engine, o.engine.draft_model) << "\n";
  }
  if (reqs.size() == 1) return run_one(o, **engine, tok, prompts[0], lines.empty() ? 0 : lines[0], std::move(reqs[0]));
  const size_t parallel = o.prompts_file.empty() || o.parallel == 0 ? reqs.size() : static_cast<size_t>(o.parallel);
  return run_many(o, **engine, tok, prompts, lines, reqs, parallel);
}

}  // namespace

// Prompts of a --prompts file: one per line; a line starting with '"' is a JSON string (for
// prompts with newlines). Empty lines are skipped; CRLF line ends are taken as LF.
Result<std::vector<FilePrompt>> read_prompts(const std::string& path) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return Error("cannot read prompts file '{}': it is a directory", path);
  }
  std::ifstream in(path);
  if (!in) return Error("cannot read prompts file '{}': {}", path, std::strerror(errno));
  std::vector<FilePrompt> prompts;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.ends_with('\r')) line.pop_back();  // a file written on Windows
    if (line.empty()) continue;
    if (const size_t valid = utf8_valid_prefix_length(line); valid < line.size()) {
      return Error("prompts file '{}' line {}: not valid UTF-8 at byte {} of the line", path, line_no, valid + 1);
    }
    if (line[0] == '"') {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_string()) {
        return Error("prompts file '{}' line {}: a line starting with '\"' must be one JSON string", path, line_no);
      }
      prompts.push_back({line_no, j.get<std::string>()});
    } else {
      prompts.push_back({line_no, line});
    }
  }
  if (prompts.empty()) return Error("prompts file '{}' has no prompt", path);
  return prompts;
}

CommandFn add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout, summary on stderr)");
  cmd->add_option("-m,--model", o->model, "GGUF model file, or 'demo' for the built-in random-weight demo model")
      ->capture_default_str();
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* stdin_flag = cmd->add_flag("--stdin", o->prompt_from_stdin, "Read the prompt from standard input (one final newline, as echo ends with, is dropped)")->excludes(prompt);
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
  cmd->add_option("--stop", o->stop, "Stop string (repeatable); it is not printed")
      ->check(non_empty(""));
  cmd->add_option("--stop-token", o->stop_ids, "Stop token id (repeatable), besides the model's end tokens");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  auto* json = cmd->add_flag("--json", o->json,
                             "Print one JSON object (prompt and generated token ids, text) instead of streaming");
  cmd->add_option("--logprobs", o->logprobs, "With --json: the top-N (0..20) log-probabilities of each generated token")
      ->check(CLI::Range(0, 20))->needs(json);
  cmd->add_option("-t,--threads", o->threads, "Compute threads (0..256); 0 = one per core")
      ->capture_default_str()->check(CLI::Range(0, 256));
  auto* prompts = cmd->add_option("--prompts", o->prompts_file,
                                  "File of prompts, one per line (a line starting with '\"' is a JSON string); "
                                  "all run concurrently, results printed in order")
                      ->excludes(prompt)
                      ->excludes(stdin_flag);
  cmd->add_option("--parallel", o->parallel,
                  "With -p: run N copies of the prompt at once (seeds SEED, SEED+1, ...). With --prompts: at most N "
                  "requests in flight (0 = all)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 16));
  o->engine.add_to(*cmd);
  cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token the vocabulary asks for");
  cmd->add_flag("--special", o->special, "Parse special tokens such as <|im_start|> in the prompt");
  return [o, prompt, prompts] {
    if (prompt->count() == 0 && !o->prompt_from_stdin && prompts->count() == 0) {
      std::cerr << "sluice generate: error: give a prompt with -p TEXT, --stdin or --prompts FILE (see sluice "
                   "generate --help)\n";
      return kExitUsage;
    }
    return run(*o);
  };
}

}  // namespace sluice::cli
