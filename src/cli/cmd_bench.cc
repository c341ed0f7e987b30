// sluice bench: load against an OpenAI-compatible endpoint; the library does the work
// (src/bench), this file turns flags into a BenchConfig and the report into output.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/report.h"
#include "bench/svg.h"
#include "cli/commands.h"

namespace sluice::cli {
namespace {

struct BenchOptions {
  bench::BenchConfig config;
  std::string api;  // "" = by workload
  std::string workload = "random";
  std::string prompt_format;  // "" = by API
  std::string prompt_tokens = "128";
  std::string output_tokens = "128";
  std::string token_range = "100:4000";
  std::string extra_body;
  std::string json_path;
  std::string svg_path;
  bool no_ignore_eos = false;
  bool no_progress = false;
};

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status::error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  return Status::ok();
}

// Fills the parts of the config that flags give as text; messages name the flags.
Status finish_config(BenchOptions& o, bool count_given, bool duration_given) {
  bench::BenchConfig& c = o.config;
  bench::WorkloadConfig& w = c.workload;
  static const std::map<std::string, bench::WorkloadKind> kKinds = {{"random", bench::WorkloadKind::kRandom},
                                                                     {"shared-prefix", bench::WorkloadKind::kSharedPrefix},
                                                                     {"chat", bench::WorkloadKind::kChat}};
  w.kind = kKinds.at(o.workload);
  w.api = o.api == "chat" || (o.api.empty() && w.kind == bench::WorkloadKind::kChat) ? bench::Api::kChat
                                                                                     : bench::Api::kCompletions;
  w.prompt_format = o.prompt_format == "text" || (o.prompt_format.empty() && w.api == bench::Api::kChat)
                        ? bench::PromptFormat::kText
                        : bench::PromptFormat::kTokens;
  auto prompt = bench::parse_length_range(o.prompt_tokens);
  if (!prompt) return prompt.error().with_context("--prompt-tokens");
  w.prompt_tokens = *prompt;
  auto output = bench::parse_length_range(o.output_tokens);
  if (!output) return output.error().with_context("--output-tokens");
  w.output_tokens = *output;
  const size_t colon = o.token_range.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument("no colon");
    size_t end = 0;
    w.token_id_min = std::stoi(o.token_range.substr(0, colon), &end);
    if (end != colon) throw std::invalid_argument("junk");
    const std::string hi = o.token_range.substr(colon + 1);
    w.token_id_max = std::stoi(hi, &end);
    if (end != hi.size()) throw std::invalid_argument("junk");
  } catch (const std::exception&) {
    return Status::error(fmt::format("--token-range: '{}' is not LO:HI (token ids from LO up to, not including, HI)",
                                     o.token_range));
  }
  if (!o.extra_body.empty()) {
    c.extra_body = nlohmann::json::parse(o.extra_body, nullptr, false);
    if (c.extra_body.is_discarded() || !c.extra_body.is_object()) {
      return Status::error(fmt::format("--extra-body: '{}' is not a JSON object", o.extra_body));
    }
  }
  c.ignore_eos = !o.no_ignore_eos;
  if (c.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) c.api_key = key;
  }
  // Without a bound, a random run sends 100 requests; the other workloads run through once.
  if (!count_given && !duration_given && w.kind == bench::WorkloadKind::kRandom) c.num_requests = 100;
  return bench::validate(c);
}

bench::ProgressFn progress_line() {
  return [](const bench::Progress& p) {
    const std::string total = p.num_total >= 0 ? fmt::format("/{}", p.num_total) : "";
    const std::string time = p.duration_s > 0 ? fmt::format("{:.0f}/{:g} s", p.elapsed_s, p.duration_s)
                                              : fmt::format("{:.1f} s", p.elapsed_s);
    const double tok_s = p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0;
    std::fprintf(stderr, "\r\033[K%s: %lld%s requests, %lld errors, %lld in flight, %.0f output tok/s, %s",
                 p.warmup ? "warmup" : "bench", static_cast<long long>(p.num_done), total.c_str(),
                 static_cast<long long>(p.num_errors), static_cast<long long>(p.num_in_flight), tok_s, time.c_str());
    std::fflush(stderr);
  };
}

int run(BenchOptions& o, bool count_given, bool duration_given) {
  if (!o.json_path.empty() && same_file(o.json_path, o.svg_path)) {
    std::cerr << "sluice bench: error: --json and --svg name the same file (the chart would overwrite the JSON)\n";
    return kExitUsage;
  }
  if (Status s = finish_config(o, count_given, duration_given); !s) {
    std::cerr << "sluice bench: error: " << s.message() << " (see sluice bench --help)\n";
    return kExitUsage;
  }
  const bool show_progress = !o.no_progress && isatty(STDERR_FILENO);
  o.config.stop_on_signal = true;  // Ctrl-C: a report of what ended, not nothing
  auto report = bench::run(o.config, show_progress ? progress_line() : bench::ProgressFn());
  if (show_progress) std::fprintf(stderr, "\r\033[K");
  if (!report) return fail(report.error().message());
  if (report->interrupted_by != 0) {
    std::cerr << fmt::format("sluice bench: interrupted: the report covers the {} measured requests sent (those in "
                             "flight when it stopped were cancelled, and count as errors of kind 'cancelled')\n",
                             report->records.size());
  }
  if (!report->gave_up.empty()) {
    std::cerr << fmt::format("sluice bench: {} (the report covers the {} measured requests sent)\n", report->gave_up,
                             report->records.size());
  }
  std::fputs(bench::format_report(*report).c_str(), stdout);
  if (!o.json_path.empty()) {
    if (Status s = write_file(o.json_path, bench::report_json(*report).dump(2) + "\n"); !s) return fail(s.message());
  }
  if (!o.svg_path.empty()) {
    if (Status s = write_file(o.svg_path, bench::render_svg(*report)); !s) return fail(s.message());
  }
  if (const int rc = finish_stdout(); rc != kExitOk) return rc;
  if (const int sig = report->interrupted_by; sig != 0) {
    // Reported and written: now ended by the signal itself, so a shell loop around sluice
    // bench stops too (its status is 128 + the signal's number).
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return 128 + sig;
  }
  if (!report->gave_up.empty()) return kExitError;  // reported and written: the server went away
  if (report->summary.num_ok == 0) {
    for (const bench::RequestRecord& r : report->records) {
      if (!r.ok) {
        // Random prompts of ids past a small vocabulary are refused, each one: say which flag moves them.
        const bool ids = o.config.workload.prompt_format == bench::PromptFormat::kTokens &&
                         r.error.find("'prompt' token") != std::string::npos &&
                         r.error.find("outside the vocabulary") != std::string::npos;
        return fail("every request failed; the first: " + r.error +
                    (ids ? fmt::format(" (the random prompts take token ids from --token-range {}: give a range "
                                       "inside the model's vocabulary)",
                                       o.token_range)
                         : std::string()));
      }
    }
    return fail("no request was sent");
  }
  return kExitOk;
}

}  // namespace

CommandFn add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  bench::BenchConfig& c = o->config;
  bench::WorkloadConfig& w = c.workload;
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Load an OpenAI-compatible server (sluice serve, vLLM, llama.cpp) and report latency and throughput.\n"
      "Every request streams; TTFT = sent to first token chunk, ITL = gaps between token chunks, TPOT = (E2E - "
      "TTFT) / (output tokens - 1), E2E = sent to last byte. The table goes to stdout, progress to stderr.");
  const char* server = "Server";
  cmd->add_option("--url", c.url,
                  "Base URL (http or https): http://HOST:PORT means http://HOST:PORT/v1; a URL with a path is the "
                  "API root as given")
      ->capture_default_str()->group(server);
  cmd->add_option("-m,--model", c.model, "Model name to send (default: the first of GET /v1/models)")->group(server);
  cmd->add_option("--api-key", c.api_key, "Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY if set)")
      ->group(server);
  cmd->add_option("--api", o->api,
                  "Endpoint: completions (/v1/completions) or chat (/v1/chat/completions); default: chat for the chat "
                  "workload, else completions")
      ->check(CLI::IsMember({"completions", "chat"}))->group(server);

  const char* workload = "Workload";
  cmd->add_option("--workload", o->workload,
                  "random: independent prompts; shared-prefix: --prefixes long prompts x --questions each, shuffled; "
                  "chat: --sessions conversations of --turns turns, each resending its history, session id in 'user'")
      ->capture_default_str()->check(CLI::IsMember({"random", "shared-prefix", "chat"}))->group(workload);
  cmd->add_option("--prompt-tokens", o->prompt_tokens,
                  "Prompt length N, or MIN:MAX drawn uniformly (shared-prefix: the question after the prefix; chat: "
                  "each user turn)")
      ->capture_default_str()->group(workload);
  cmd->add_option("--output-tokens", o->output_tokens, "max_tokens of each request: N, or MIN:MAX drawn uniformly")
      ->capture_default_str()->group(workload);
  cmd->add_option("--prompt-format", o->prompt_format,
                  "tokens: a list of random token ids, exactly --prompt-tokens long (completions only); text: random "
                  "common English words, about one token each (usage.prompt_tokens gives the real count). Default: "
                  "tokens for completions, text for chat")
      ->check(CLI::IsMember({"tokens", "text"}))->group(workload);
  cmd->add_option("--token-range", o->token_range,
                  "Token ids of token prompts are drawn from [LO, HI): the default fits every vocabulary of 4096 "
                  "tokens or more and skips the control tokens at the bottom of most; a smaller model needs a "
                  "smaller HI")
      ->capture_default_str()->group(workload);
  cmd->add_option("--prefixes", w.num_prefixes, "shared-prefix: number of distinct prefixes")
      ->capture_default_str()->group(workload);
  cmd->add_option("--questions", w.num_questions, "shared-prefix: questions per prefix")
      ->capture_default_str()->group(workload);
  cmd->add_option("--prefix-tokens", w.prefix_tokens, "shared-prefix: length of each prefix")
      ->capture_default_str()->group(workload);
  cmd->add_option("--sessions", w.num_sessions, "chat: number of conversations")->capture_default_str()->group(workload);
  cmd->add_option("--turns", w.num_turns, "chat: turns per conversation")->capture_default_str()->group(workload);
  cmd->add_option("--seed", w.seed, "Seed of prompts, lengths and arrival times: a seed gives the same requests")->check(seed_validator())
      ->capture_default_str()->group(workload);

  const char* load = "Load";
  auto* concurrency = cmd->add_option("-c,--concurrency", c.concurrency,
                                      "Closed loop: N clients, each sending its next request when the last ended")
                          ->capture_default_str()->check(CLI::Range(1, 100000))->group(load);
  auto* rate = cmd->add_option("--rate", c.rate,
                               "Open loop: R requests/s on average, Poisson arrivals (exponential gaps); the first "
                               "goes at once")
                   ->check(positive_number())->excludes(concurrency)->group(load);
  cmd->add_option("--max-concurrency", c.max_concurrency,
                  "Open loop: at most N requests in flight; a later arrival waits for one to end (0 = no cap)")
      ->check(CLI::Range(0, 100000))->needs(rate)->group(load);
  auto* count = cmd->add_option("-n,--num-requests", c.num_requests,
                                "Stop sending after N measured requests (default without --duration: 100 for random, "
                                "one pass of the workload otherwise)")
                    ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->group(load);
  auto* duration = cmd->add_option("--duration", c.duration_s, "Stop sending after S seconds")
                       ->check(positive_number())->group(load);
  cmd->add_option("--warmup", c.warmup,
                  "Send N requests first, not counted, in closed loop at --concurrency (open loop: at "
                  "--max-concurrency, or 1). They are random prompts of the same lengths, so that warmup does not "
                  "fill the prefix cache with the workload's own prefixes")
      ->capture_default_str()->check(CLI::Range(0, 1000000))->group(load);
  cmd->add_option("--timeout", c.request_timeout_s, "Seconds one request may take before it counts as a timeout")
      ->capture_default_str()->check(positive_number())->group(load);
  cmd->add_option("--drain-timeout", c.drain_timeout_s,
                  "After --duration, seconds the requests in flight may take to finish before they are cancelled")
      ->capture_default_str()->check(non_negative_number())->group(load);

  const char* request = "Request";
  cmd->add_flag("--no-ignore-eos", o->no_ignore_eos,
                "Do not send \"ignore_eos\": true (an extension of vLLM, llama.cpp and sluice that makes every output "
                "exactly max_tokens long); for servers that reject unknown fields")
      ->group(request);
  cmd->add_option("--temperature", c.temperature, "Sampling temperature sent with each request")
      ->capture_default_str()->group(request);
  cmd->add_option("--extra-body", o->extra_body,
                  "A JSON object merged into every request body, last (e.g. '{\"top_k\": 1}')")
      ->group(request);

  const char* output = "Output";
  cmd->add_option("--json", o->json_path, "Write config, summary and every request's record as JSON to FILE")
      ->check(output_file())->group(output);
  cmd->add_option("--svg", o->svg_path,
                  "Write an SVG chart to FILE: latency by send time, output throughput over time, latency CDFs")
      ->check(output_file())->group(output);
  cmd->add_flag("--no-progress", o->no_progress, "No progress line on stderr (shown only when it is a terminal)")
      ->group(output);
  return [o, count, duration] { return run(*o, count->count() > 0, duration->count() > 0); };
}

}  // namespace sluice::cli
