// spec_bench: speculative decoding against decoding without it, as ratios taken in one run.
//
// For each number of concurrent requests, greedy generation of --tokens tokens per request:
//   off          no speculation (the baseline; its outputs are the reference)
//   ngram        prompt lookup (--spec ngram)
//   pred exact   each request's prediction is its own baseline output (predicted outputs)
//   pred 10%/30% the same prediction with that fraction of its tokens changed
// and per workload: aggregate tokens/s, its ratio to off, draft tokens accepted of those
// verified, accepted by draft position, and whether every output equals the baseline's.
//
//   draft model  --draft-model FILE (a smaller model, or a lower-bit copy of the target)
//
// Usage: spec_bench [-m FILE.gguf | --preset NAME --dtype TYPE] [--threads N] [--tokens N]
//                   [--concurrency 1,4,16] [--spec-tokens K] [--spec-adaptive on|off]
//                   [--draft-model FILE] [--prompt TEXT]
#include <chrono>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>

#include "bench/bench_model.h"
#include "engine/engine.h"
#include "kernels/kernel_path.h"

namespace sluice::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int32_t> perturb(std::vector<int32_t> t, double fraction, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int32_t& x : t) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) < fraction) x = static_cast<int32_t>(rng() % vocab);
  }
  return t;
}

struct RunResult {
  double seconds = 0;
  int64_t tokens = 0;
  std::vector<std::vector<int32_t>> outputs;
  EngineMetrics::SpecStats spec;  // summed over proposers
};

RunResult run_workload(Model& model, const Tokenizer& tok, ThreadPool& pool, const EngineConfig& config,
                       const std::vector<Request>& requests) {
  auto engine = Engine::create(model, tok, pool, config);
  if (!engine) std::fprintf(stderr, "%s\n", engine.error().message().c_str()), std::exit(1);
  RunResult r;
  const double t0 = now();
  std::vector<RequestHandle> handles;
  for (const Request& req : requests) {
    auto h = (*engine)->submit(req);
    if (!h) std::fprintf(stderr, "%s\n", h.error().message().c_str()), std::exit(1);
    handles.push_back(std::move(*h));
  }
  for (RequestHandle& h : handles) {
    StreamOutput o = h.wait();
    std::vector<int32_t> ids;
    for (const TokenOutput& t : o.tokens) ids.push_back(t.token_id);
    r.tokens += static_cast<int64_t>(ids.size());
    r.outputs.push_back(std::move(ids));
  }
  r.seconds = now() - t0;
  for (const auto& [name, s] : (*engine)->wait_until_idle().spec) {
    r.spec.num_drafts += s.num_drafts;
    r.spec.num_draft_tokens += s.num_draft_tokens;
    r.spec.num_accepted_tokens += s.num_accepted_tokens;
    r.spec.accepted_per_position.resize(std::max(r.spec.accepted_per_position.size(), s.accepted_per_position.size()));
    for (size_t i = 0; i < s.accepted_per_position.size(); ++i) r.spec.accepted_per_position[i] += s.accepted_per_position[i];
  }
  return r;
}

int run(int argc, char** argv) {
  CLI::App app{"spec_bench: speculative decoding (prompt lookup, predicted outputs) against none, in one run"};
  std::string model_path, preset = "qwen2.5-0.5b", dtype = "q8_0";
  std::string prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside";
  int threads = 0, tokens = 64, spec_tokens = 8;
  std::string adaptive = "on", draft_path;
  std::vector<int> concurrency{1, 4, 16};
  app.add_option("-m,--model", model_path, "GGUF model (default: make --preset/--dtype in memory)");
  app.add_option("--preset", preset, "Preset shape of the in-memory model")->capture_default_str();
  app.add_option("--dtype", dtype, "Weight type of the in-memory model")->capture_default_str();
  app.add_option("-t,--threads", threads, "Threads; 0 = one per core")->capture_default_str();
  app.add_option("--tokens", tokens, "Tokens generated per request")->capture_default_str()->check(CLI::Range(2, 4096));
  app.add_option("--concurrency", concurrency, "Concurrent requests per run, e.g. 1,4,16")->capture_default_str()->delimiter(',');
  app.add_option("--spec-tokens", spec_tokens, "Most drafts a sequence verifies per step")
      ->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--spec-adaptive", adaptive, "on: the engine picks each draft length (spec/draft_length.h); off: all drafts")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  app.add_option("--draft-model", draft_path, "Also a workload with this draft model (--spec draft)");
  app.add_option("--prompt", prompt, "Prompt of request 0 (request i appends \" i\")")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::string description;
  LoadedModel m = load_bench_model(model_path, preset, dtype, description);
  LoadedModel draft;
  if (!draft_path.empty()) {
    auto d = load_model(draft_path);
    if (!d) std::fprintf(stderr, "%s\n", d.error().message().c_str()), std::exit(1);
    draft = std::move(*d);
  }
  ThreadPool pool(threads);
  std::printf("model: %s, threads: %d, kernels: %s\n", description.c_str(), pool.num_threads(),
              kernels::kernel_path_name(kernels::active_kernel_path()));
  const int32_t vocab = m.model->config().vocab_size;
  for (int c : concurrency) {
    std::vector<Request> reqs;
    for (int i = 0; i < c; ++i) {
      Request r;
      auto ids = m.tokenizer->encode(i == 0 ? prompt : fmt::format("{} {}", prompt, i));
      if (!ids) std::fprintf(stderr, "%s\n", ids.error().message().c_str()), std::exit(1);
      r.prompt_tokens = std::move(*ids);
      r.max_tokens = tokens;
      r.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    EngineConfig base{.max_num_seqs = std::max(c, 1), .coalesce = false};
    base.spec.num_tokens = spec_tokens;
    base.spec.adaptive = adaptive == "on";
    base.kv_cache_bytes = 0;
    run_workload(*m.model, *m.tokenizer, pool, base, reqs);  // warm-up: pages, caches, repacked weights
    const RunResult off = run_workload(*m.model, *m.tokenizer, pool, base, reqs);
    std::printf("\n-- %d concurrent request%s, %d tokens each, up to %d drafts a step, adaptive %s\n", c,
                c > 1 ? "s" : "", tokens, spec_tokens, adaptive.c_str());
    std::printf("%-12s %9s %7s %10s %6s %9s  %s\n", "workload", "tok/s", "x off", "accepted", "mean k", "same out",
                "accepted by position");
    std::printf("%-12s %9.1f %7.2f %10s %6s %9s\n", "off", off.tokens / off.seconds, 1.0, "-", "-", "-");
    struct Workload {
      const char* name;
      const char* method;
      double changed;  // < 0: no prediction
    };
    std::vector<Workload> workloads{{"ngram", "ngram", -1}, {"pred exact", "off", 0.0}, {"pred 10%", "off", 0.1},
                                    {"pred 30%", "off", 0.3}};
    if (draft.model) workloads.push_back({"draft model", "draft", -1});
    for (const Workload& w : workloads) {
      EngineConfig cfg = base;
      cfg.spec.method = w.method;
      if (cfg.spec.method == "draft") {
        cfg.spec.draft_model = draft.model.get();
        cfg.spec.draft_tokenizer = draft.tokenizer.get();
      }
      std::vector<Request> rs = reqs;
      if (w.changed >= 0) {
        for (size_t i = 0; i < rs.size(); ++i) rs[i].prediction_tokens = perturb(off.outputs[i], w.changed, vocab, 7 + i);
      }
      const RunResult r = run_workload(*m.model, *m.tokenizer, pool, cfg, rs);
      std::string by_pos;
      for (int64_t n : r.spec.accepted_per_position) by_pos += fmt::format(" {}", n);
      // Mean k over the decode steps of the requests (a step that verified none counts as k = 0).
      const double decode_steps = static_cast<double>(r.tokens - r.spec.num_accepted_tokens) - c;
      std::printf("%-12s %9.1f %7.2f %4lld/%-5lld %6.2f %9s %s\n", w.name, r.tokens / r.seconds,
                  (r.tokens / r.seconds) / (off.tokens / off.seconds), static_cast<long long>(r.spec.num_accepted_tokens),
                  static_cast<long long>(r.spec.num_draft_tokens),
                  decode_steps > 0 ? static_cast<double>(r.spec.num_draft_tokens) / decode_steps : 0.0,
                  r.outputs == off.outputs ? "yes" : "NO", by_pos.c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::run(argc, argv); }
