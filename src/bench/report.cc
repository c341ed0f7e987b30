#include "bench/report.h"

#include <map>

#include <fmt/ranges.h>

namespace sluice::bench {
namespace {

double per(double x, double d) { return d > 0 ? x / d : 0; }

// No sample, no number: null rather than a 0 that reads as a measured latency.
nlohmann::json distribution_json(const Distribution& d) {
  auto v = [&](double x) { return d.count > 0 ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"count", d.count}, {"mean", v(d.mean)}, {"min", v(d.min)}, {"p50", v(d.p50)},
          {"p90", v(d.p90)},  {"p99", v(d.p99)},   {"max", v(d.max)}};
}

std::string describe_load(const BenchConfig& c) {
  std::string load = c.rate > 0 ? fmt::format("open loop, Poisson arrivals at {:g} requests/s", c.rate)
                                : fmt::format("closed loop, concurrency {}", c.concurrency);
  if (c.rate > 0 && c.max_concurrency > 0) load += fmt::format(", at most {} in flight", c.max_concurrency);
  std::vector<std::string> bounds;
  if (c.num_requests > 0) bounds.push_back(fmt::format("{} requests", c.num_requests));
  if (c.duration_s > 0) bounds.push_back(fmt::format("{:g} s", c.duration_s));
  if (!bounds.empty()) load += fmt::format("; up to {}", fmt::join(bounds, " or "));
  if (c.warmup > 0) load += fmt::format(" (after {} warmup requests)", c.warmup);
  return load;
}

std::string describe_workload(const WorkloadConfig& w) {
  std::string s = fmt::format("{} workload, {} API, {} prompts", workload_name(w.kind), api_name(w.api),
                              w.prompt_format == PromptFormat::kTokens ? "token-id" : "text");
  switch (w.kind) {
    case WorkloadKind::kRandom:
      s += fmt::format(" of {} tokens", w.prompt_tokens.to_string());
      break;
    case WorkloadKind::kSharedPrefix:
      s += fmt::format(": {} prefixes of {} tokens x {} questions of {} tokens", w.num_prefixes, w.prefix_tokens,
                       w.num_questions, w.prompt_tokens.to_string());
      break;
    case WorkloadKind::kChat:
      s += fmt::format(": {} sessions x {} turns of {} tokens", w.num_sessions, w.num_turns, w.prompt_tokens.to_string());
      break;
  }
  return s + fmt::format(", {} output tokens", w.output_tokens.to_string());
}

}  // namespace

Summary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  std::map<std::string, ErrorSummary> errors;
  int64_t usage_tokens = 0, usage_chunks = 0;
  for (const RequestRecord& r : records) {
    ++s.num_requests;
    if (!r.ok) {
      ++s.num_errors;
      ErrorSummary& e = errors[r.error_kind];
      if (e.count++ == 0) e.kind = r.error_kind, e.sample = r.error;
      continue;
    }
    ++s.num_ok;
    const int64_t prompt = r.prompt_tokens >= 0 ? r.prompt_tokens : r.expected_prompt_tokens;
    s.prompt_tokens += prompt;
    s.output_tokens += r.output_tokens;
    if (r.ttft_s >= 0) ttft.push_back(1000 * r.ttft_s);
    if (r.tpot_s() >= 0) tpot.push_back(1000 * r.tpot_s());
    for (double gap : r.itl_s) itl.push_back(1000 * gap);
    e2e.push_back(1000 * r.e2e_s);
    if (r.cached_tokens >= 0 && r.prompt_tokens >= 0) {
      ++s.num_with_cache_info;
      s.cached_tokens += r.cached_tokens;
      s.cache_info_prompt_tokens += r.prompt_tokens;
    }
    if (r.output_tokens_from_usage && r.num_token_chunks > 0) {
      usage_tokens += r.output_tokens;
      usage_chunks += r.num_token_chunks;
    }
    if (!r.output_tokens_from_usage) ++s.num_without_usage;
  }
  s.ttft_ms = distribution(std::move(ttft));
  s.tpot_ms = distribution(std::move(tpot));
  s.itl_ms = distribution(std::move(itl));
  s.e2e_ms = distribution(std::move(e2e));
  s.requests_per_s = per(static_cast<double>(s.num_ok), duration_s);
  s.output_tokens_per_s = per(static_cast<double>(s.output_tokens), duration_s);
  s.total_tokens_per_s = per(static_cast<double>(s.output_tokens + s.prompt_tokens), duration_s);
  if (s.num_with_cache_info > 0) {
    s.cached_fraction = per(static_cast<double>(s.cached_tokens), static_cast<double>(s.cache_info_prompt_tokens));
  }
  s.tokens_per_chunk = per(static_cast<double>(usage_tokens), static_cast<double>(usage_chunks));
  for (auto& [kind, e] : errors) s.errors.push_back(std::move(e));
  std::stable_sort(s.errors.begin(), s.errors.end(),
                   [](const ErrorSummary& a, const ErrorSummary& b) { return a.count > b.count; });
  return s;
}

std::string format_report(const BenchReport& report) {
  const BenchConfig& c = report.config;
  const Summary& s = report.summary;
  std::string out;
  auto line = [&out](std::string_view label, const std::string& text) {
    out += fmt::format("{:<16}{}\n", label, text);
  };
  line("server", fmt::format("{}, model {}", report.api_url, c.model));
  line("workload", describe_workload(c.workload));
  line("load", describe_load(c));
  out += "\n";
  line("requests", fmt::format("{} sent, {} ok, {} failed, in {:.2f} s", s.num_requests, s.num_ok, s.num_errors,
                               s.duration_s));
  line("throughput", fmt::format("{:.2f} requests/s, {:.1f} output tokens/s, {:.1f} total tokens/s", s.requests_per_s,
                                 s.output_tokens_per_s, s.total_tokens_per_s));
  const double ok = std::max<double>(1, static_cast<double>(s.num_ok));
  line("tokens", fmt::format("prompt {} ({:.1f} per request), output {} ({:.1f} per request)", s.prompt_tokens,
                             static_cast<double>(s.prompt_tokens) / ok, s.output_tokens,
                             static_cast<double>(s.output_tokens) / ok));
  if (s.cached_fraction) {
    line("cached tokens", fmt::format("{:.1f}% of prompt tokens ({} of {}, from {} requests' usage)",
                                      100 * *s.cached_fraction, s.cached_tokens, s.cache_info_prompt_tokens,
                                      s.num_with_cache_info));
  } else {
    line("cached tokens", "unknown: no response reported usage.prompt_tokens_details.cached_tokens");
  }
  out += fmt::format("\n{:<24}{:>10}{:>10}{:>10}{:>10}{:>8}\n", "latency (ms)", "mean", "p50", "p90", "p99", "n");
  const std::pair<const char*, const Distribution*> rows[] = {{"time to first token", &s.ttft_ms},
                                                              {"time per output token", &s.tpot_ms},
                                                              {"inter-token latency", &s.itl_ms},
                                                              {"end to end", &s.e2e_ms}};
  for (const auto& [name, d] : rows) {
    if (d->count == 0) {
      out += fmt::format("{:<24}{:>10}{:>10}{:>10}{:>10}{:>8}\n", name, "-", "-", "-", "-", 0);
    } else {
      out += fmt::format("{:<24}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}{:>8}\n", name, d->mean, d->p50, d->p90, d->p99,
                         d->count);
    }
  }
  if (s.tokens_per_chunk > 1.05) {
    out += fmt::format("note: stream chunks carried {:.2f} tokens on average; inter-token latency is per chunk\n",
                       s.tokens_per_chunk);
  }
  if (s.num_without_usage > 0) {
    out += fmt::format("note: {} responses reported no usage; their output tokens are counted from chunks (a lower "
                       "bound where a chunk carries several)\n",
                       s.num_without_usage);
  }
  if (report.workload_size >= 0) {
    out += fmt::format("note: the workload holds {} requests, fewer than the {} asked for; each was sent once\n",
                       report.workload_size, c.num_requests);
  }
  if (!s.errors.empty()) {
    out += fmt::format("\nerrors ({})\n", s.num_errors);
    for (const ErrorSummary& e : s.errors) out += fmt::format("  {:<14}{:>6}  {}\n", e.kind, e.count, e.sample);
  }
  return out;
}

nlohmann::json config_json(const BenchConfig& c) {
  const WorkloadConfig& w = c.workload;
  return {{"url", c.url},
          {"model", c.model},
          {"workload", workload_name(w.kind)},
          {"api", api_name(w.api)},
          {"prompt_format", prompt_format_name(w.prompt_format)},
          {"prompt_tokens", w.prompt_tokens.to_string()},
          {"output_tokens", w.output_tokens.to_string()},
          {"token_range", {w.token_id_min, w.token_id_max}},
          {"prefixes", w.num_prefixes},
          {"questions", w.num_questions},
          {"prefix_tokens", w.prefix_tokens},
          {"sessions", w.num_sessions},
          {"turns", w.num_turns},
          {"seed", w.seed},
          {"concurrency", c.rate > 0 ? nlohmann::json() : nlohmann::json(c.concurrency)},
          {"rate", c.rate > 0 ? nlohmann::json(c.rate) : nlohmann::json()},
          {"max_concurrency", c.max_concurrency},
          {"num_requests", c.num_requests},
          {"duration_s", c.duration_s},
          {"warmup", c.warmup},
          {"request_timeout_s", c.request_timeout_s},
          {"drain_timeout_s", c.drain_timeout_s},
          {"ignore_eos", c.ignore_eos},
          {"temperature", c.temperature},
          {"extra_body", c.extra_body}};
}

nlohmann::json report_json(const BenchReport& report) {
  const Summary& s = report.summary;
  nlohmann::json errors = nlohmann::json::array();
  for (const ErrorSummary& e : s.errors) errors.push_back({{"kind", e.kind}, {"count", e.count}, {"sample", e.sample}});
  nlohmann::json summary = {{"num_requests", s.num_requests},
                            {"num_ok", s.num_ok},
                            {"num_errors", s.num_errors},
                            {"duration_s", s.duration_s},
                            {"requests_per_s", s.requests_per_s},
                            {"output_tokens_per_s", s.output_tokens_per_s},
                            {"total_tokens_per_s", s.total_tokens_per_s},
                            {"prompt_tokens", s.prompt_tokens},
                            {"output_tokens", s.output_tokens},
                            {"ttft_ms", distribution_json(s.ttft_ms)},
                            {"tpot_ms", distribution_json(s.tpot_ms)},
                            {"itl_ms", distribution_json(s.itl_ms)},
                            {"e2e_ms", distribution_json(s.e2e_ms)},
                            {"cached_tokens", s.cached_tokens},
                            {"cache_info_prompt_tokens", s.cache_info_prompt_tokens},
                            {"num_with_cache_info", s.num_with_cache_info},
                            {"cached_fraction", s.cached_fraction ? nlohmann::json(*s.cached_fraction) : nlohmann::json()},
                            {"tokens_per_chunk", s.tokens_per_chunk},
                            {"num_without_usage", s.num_without_usage},
                            {"errors", errors}};
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& r : report.records) requests.push_back(record_json(r));
  return {{"format", "sluice-bench/1"},
          {"api_url", report.api_url},
          {"config", config_json(report.config)},
          {"summary", std::move(summary)},
          {"interrupted", report.interrupted_by != 0},
          {"gave_up", report.gave_up.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.gave_up)},
          {"requests", std::move(requests)}};
}

}  // namespace sluice::bench
