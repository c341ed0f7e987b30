#include "pair/pair.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "engine/engine.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "model/batch.h"

namespace sluice::pair {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Logits of `model` at every position from `from - 1` on, teacher-forced over `tokens`: row i
// predicts tokens[from + i]. One sequence, one forward pass (chunked under 512 tokens).
std::vector<float> teacher_forced_logits(Model& model, ThreadPool& pool, const std::vector<int32_t>& tokens,
                                         size_t from) {
  constexpr int32_t kBlock = 16, kChunk = 512;
  const auto n = static_cast<int32_t>(tokens.size());
  KvPool kv(model.config(), (n + kBlock - 1) / kBlock, kBlock, KvType::kF32);
  std::vector<int32_t> blocks((n + kBlock - 1) / kBlock);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<float> all, logits;
  for (int32_t start = 0; start < n - 1; start += kChunk) {
    ForwardBatch b;
    b.block_size = kBlock;
    b.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
    const int32_t row = b.add_sequence(blocks);
    const int32_t end = std::min(n - 1, start + kChunk);  // the last token predicts nothing
    for (int32_t p = start; p < end; ++p) b.add_token(row, tokens[p], p, p + 1 >= static_cast<int32_t>(from));
    const Status st = model.forward(b, kv, pool, logits);
    SLUICE_CHECK(st.is_ok()) << st.message();
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// Probabilities at temperature t (> 0) over the first `vocab` logits; greedy callers use argmax.
void softmax(std::span<const float> z, float t, std::vector<double>& p) {
  p.resize(z.size());
  const float m = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(static_cast<double>(z[i] - m) / t);
  for (double& x : p) x /= sum;
}

int32_t argmax(std::span<const float> z) {
  return static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin());  // ties: the lowest id
}

// A_j from the per-position acceptances of draft position m at start s: accept[s][m].
std::vector<double> chain_acceptance(const std::vector<std::vector<double>>& accept, int32_t max_k) {
  std::vector<double> sum(max_k, 0);
  std::vector<int64_t> count(max_k, 0);
  for (const auto& row : accept) {
    double prod = 1;
    for (int32_t j = 0; j < max_k && j < static_cast<int32_t>(row.size()); ++j) {
      prod *= row[j];
      sum[j] += prod;
      ++count[j];
    }
  }
  for (int32_t j = 0; j < max_k; ++j) sum[j] = count[j] ? sum[j] / static_cast<double>(count[j]) : 0;
  return sum;
}

// Seconds of one decode step of `model`: `batch` sequences at `context`, `tokens` new tokens each
// (all with logits, as verification has); the best of two.
double step_seconds(Model& model, ThreadPool& pool, int32_t batch, int32_t tokens, int32_t context) {
  constexpr int32_t kBlock = 16;
  const int32_t per_seq = (context + tokens + kBlock - 1) / kBlock;
  KvPool kv(model.config(), batch * per_seq, kBlock, KvType::kF16);
  ForwardBatch b;
  b.block_size = kBlock;
  b.max_blocks_per_seq = per_seq;
  const int32_t vocab = model.config().vocab_size;
  for (int32_t s = 0; s < batch; ++s) {
    std::vector<int32_t> blocks(per_seq);
    std::iota(blocks.begin(), blocks.end(), s * per_seq);
    const int32_t row = b.add_sequence(blocks);
    for (int32_t i = 0; i < tokens; ++i) b.add_token(row, (7 * (s + i) + 3) % vocab, context + i, true);
  }
  std::vector<float> logits;
  // The least of several runs: the first touches the cache's pages, and a small model's step of
  // microseconds is mostly noise in one or two. At least 3 runs and 50 ms, at most 200 runs.
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 200 && (rep < 3 || total < 0.05); ++rep) {
    const double t0 = now();
    SLUICE_CHECK(model.forward(b, kv, pool, logits).is_ok());
    const double t = now() - t0;
    best = std::min(best, t);
    total += t;
  }
  return best;
}

// The request for prompt i, as every run of pair makes it.
Request pair_request(const std::vector<int32_t>& prompt, size_t i, const PairOptions& options) {
  Request r;
  r.prompt_tokens = prompt;
  r.max_tokens = options.max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = options.temperature;
  r.seed = options.seed + i;
  return r;
}

std::vector<int32_t> token_ids(const StreamOutput& o) {
  std::vector<int32_t> ids;
  for (const TokenOutput& t : o.tokens) ids.push_back(t.token_id);
  return ids;
}

// The k values whose verification cost is measured; others are interpolated.
std::vector<int32_t> measured_ks(int32_t max_k) {
  std::vector<int32_t> ks{0};
  for (int32_t k = 1; k <= max_k; k *= 2) ks.push_back(k);
  if (ks.back() != max_k) ks.push_back(max_k);
  return ks;
}

}  // namespace

// The chance that the exponential race of one draw (Sampler: -log(U_x) / p_x, least wins) picks
// the same token under p and under q: sluice's acceptance of a draft model, which drafts with the
// target's own draws (draft_model_proposer.h). x wins both when E_x / p_x and E_x / q_x beat every
// E_y / p_y and E_y / q_y, i.e. E_y > E_x max(p_y/p_x, q_y/q_x) for all y; integrating over E_x,
// P(x wins both) = 1 / sum_y max(p_y/p_x, q_y/q_x). With the tokens sorted by r = q/p, the max is
// p_y/p_x for r_y <= r_x and q_y/q_x after: prefix sums make it O(vocab log vocab).
double race_agreement(const std::vector<double>& p, const std::vector<double>& q) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0 || q[i] > 0) order.push_back(static_cast<int32_t>(i));
  }
  // q/p ascending without dividing: q_a p_b < q_b p_a (p = 0 sorts last, q = 0 first).
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return q[a] * p[b] < q[b] * p[a]; });
  double suffix_q = 0;
  for (int32_t y : order) suffix_q += q[y];
  double prefix_p = 0, agree = 0;
  for (int32_t x : order) {
    prefix_p += p[x];
    suffix_q -= q[x];
    if (p[x] > 0 && q[x] > 0) agree += 1.0 / (prefix_p / p[x] + std::max(0.0, suffix_q) / q[x]);
  }
  return agree;
}

Result<std::vector<std::vector<int32_t>>> target_outputs(Model& target, const Tokenizer& tokenizer, ThreadPool& pool,
                                                         const std::vector<std::vector<int32_t>>& prompts,
                                                         const PairOptions& options) {
  auto engine = Engine::create(target, tokenizer, pool, EngineConfig{.max_num_seqs = 8, .coalesce = false});
  if (!engine) return Error(engine.error());
  std::vector<RequestHandle> handles;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto h = (*engine)->submit(pair_request(prompts[i], i, options));
    if (!h) return Error(h.error());
    handles.push_back(std::move(*h));
  }
  std::vector<std::vector<int32_t>> out;
  for (RequestHandle& h : handles) {
    StreamOutput o = h.wait();
    if (o.finish_reason == FinishReason::kError) return Error("the target failed: {}", o.error);
    out.push_back(token_ids(o));
  }
  return out;
}

void measure_acceptance(Model& target, const Tokenizer& target_tokenizer, ThreadPool& pool,
                        const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<std::vector<int32_t>>& outputs, const PairOptions& options, Candidate& c) {
  if (c.model != nullptr) {
    if (Status s = spec::check_draft_vocabulary(target_tokenizer, *c.tokenizer); !s) {
      c.refused = s.message();
      return;
    }
  }
  const int32_t vocab = c.model ? std::min(target.config().vocab_size, c.model->config().vocab_size)
                                : target.config().vocab_size;
  const bool greedy = options.temperature <= 0;
  std::vector<std::vector<double>> accept;  // [start][draft position]
  double sum = 0, sum_min = 0;
  std::vector<double> p, q;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens = prompts[i];
    tokens.insert(tokens.end(), outputs[i].begin(), outputs[i].end());
    const size_t from = prompts[i].size(), n = outputs[i].size();
    if (n == 0) continue;
    const std::vector<float> tl = teacher_forced_logits(target, pool, tokens, from);
    const int64_t tv = target.config().vocab_size;
    std::vector<float> dl;
    int64_t dv = 0;
    if (c.model) {
      dl = teacher_forced_logits(*c.model, pool, tokens, from);
      dv = c.model->config().vocab_size;
    }
    // a[j]: the acceptance of the candidate's token at output position j, given the prefix.
    std::vector<double> a(n);
    std::vector<std::vector<int32_t>> lookups;  // prompt lookup: the proposal from each start
    for (size_t j = 0; j < n; ++j) {
      const std::span<const float> zt(tl.data() + j * tv, vocab);
      if (c.model) {
        const std::span<const float> zd(dl.data() + j * dv, vocab);
        if (greedy) {
          a[j] = argmax(zd) == argmax(zt) ? 1.0 : 0.0;
          sum_min += a[j];
        } else {
          softmax(zt, options.temperature, p);
          softmax(zd, options.temperature, q);
          a[j] = race_agreement(p, q);
          double m = 0;
          for (int32_t x = 0; x < vocab; ++x) m += std::min(p[x], q[x]);
          sum_min += m;
        }
        sum += a[j];
      }
    }
    if (c.model) {
      // A draft model's draft at depth m from start s follows the target's own tokens up to
      // s + m - 1 (the earlier drafts were accepted, so they are those tokens).
      for (size_t s = 0; s < n; ++s) {
        accept.emplace_back(a.begin() + s, a.begin() + std::min(n, s + options.max_k));
      }
    } else {
      // Prompt lookup drafts up to max_k tokens at once from the prefix at s.
      for (size_t s = 0; s < n; ++s) {
        const std::span<const int32_t> prefix(tokens.data(), from + s);
        const std::vector<int32_t> d = spec::NgramProposer::lookup(prefix, c.ngram_min, c.ngram_max, options.max_k);
        std::vector<double> row;
        for (size_t m = 0; m < d.size() && s + m < n; ++m) {
          const std::span<const float> zt(tl.data() + (s + m) * tv, vocab);
          double acc = 0;
          if (greedy) {
            acc = d[m] == argmax(zt) ? 1.0 : 0.0;
          } else {
            softmax(zt, options.temperature, p);
            acc = d[m] < vocab ? p[d[m]] : 0.0;
          }
          row.push_back(acc);
        }
        // No proposal: acceptance 0 at every depth (nothing drafted, nothing gained).
        row.resize(std::min<size_t>(options.max_k, n - s), 0.0);
        sum += row.empty() ? 0 : row[0];
        accept.push_back(std::move(row));
      }
      sum_min = sum;
    }
    c.positions += static_cast<int64_t>(n);
  }
  c.acceptance = c.positions ? sum / static_cast<double>(c.positions) : 0;
  c.acceptance_min_pq = c.positions ? sum_min / static_cast<double>(c.positions) : 0;
  c.accepted_at = chain_acceptance(accept, options.max_k);
}

TargetCosts measure_target_costs(Model& target, ThreadPool& pool, int32_t context, const PairOptions& options) {
  TargetCosts costs;
  const std::vector<int32_t> ks = measured_ks(options.max_k);
  for (int32_t b : options.batch_sizes) {
    std::vector<double> measured;
    for (int32_t k : ks) measured.push_back(step_seconds(target, pool, b, k + 1, context));
    std::vector<double> row(options.max_k + 1);
    for (int32_t k = 0; k <= options.max_k; ++k) {  // linear between measured ks
      const auto hi = std::lower_bound(ks.begin(), ks.end(), k) - ks.begin();
      if (ks[hi] == k) {
        row[k] = measured[hi];
      } else {
        const double f = static_cast<double>(k - ks[hi - 1]) / (ks[hi] - ks[hi - 1]);
        row[k] = measured[hi - 1] + f * (measured[hi] - measured[hi - 1]);
      }
    }
    costs.step_seconds.push_back(std::move(row));
  }
  return costs;
}

void measure_draft_costs(ThreadPool& pool, int32_t context, const PairOptions& options, Candidate& c) {
  c.draft_step_seconds.clear();
  for (int32_t b : options.batch_sizes) {
    c.draft_step_seconds.push_back(c.model ? step_seconds(*c.model, pool, b, 1, context) : 0.0);
  }
}

void predict_speedup(const TargetCosts& costs, const PairOptions& options, Candidate& c) {
  c.best_k.assign(options.batch_sizes.size(), 0);
  c.speedup.assign(options.batch_sizes.size(), 1.0);
  if (!c.refused.empty()) return;
  for (size_t bi = 0; bi < options.batch_sizes.size(); ++bi) {
    const std::vector<double>& t = costs.step_seconds[bi];
    double expected = 1;
    for (int32_t k = 1; k <= options.max_k; ++k) {
      expected += c.accepted_at[k - 1];
      const double s = expected * t[0] / (t[k] + k * c.draft_step_seconds[bi]);
      if (s > c.speedup[bi]) c.speedup[bi] = s, c.best_k[bi] = k;
    }
  }
}

Status confirm(Model& target, const Tokenizer& tokenizer, ThreadPool& pool,
               const std::vector<std::vector<int32_t>>& prompts, const PairOptions& options, Candidate& c) {
  const int32_t k = std::max(1, c.best_k.empty() ? 1 : c.best_k[0]);
  auto run = [&](bool spec) -> Result<std::pair<double, std::vector<std::vector<int32_t>>>> {
    EngineConfig cfg{.max_num_seqs = 1, .coalesce = false};
    if (spec) {
      cfg.spec.num_tokens = k;
      cfg.spec.adaptive = false;
      if (c.model) {
        cfg.spec.method = "draft";
        cfg.spec.draft_model = c.model;
        cfg.spec.draft_tokenizer = c.tokenizer;
      } else {
        cfg.spec.method = "ngram";
        cfg.spec.ngram_min = c.ngram_min;
        cfg.spec.ngram_max = c.ngram_max;
      }
    }
    auto engine = Engine::create(target, tokenizer, pool, cfg);
    if (!engine) return Error(engine.error());
    std::vector<std::vector<int32_t>> outs;
    int64_t tokens = 0;
    const double t0 = now();
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto h = (*engine)->submit(pair_request(prompts[i], i, options));
      if (!h) return Error(h.error());
      StreamOutput o = h->wait();
      if (o.finish_reason == FinishReason::kError) return Error("the engine failed: {}", o.error);
      tokens += static_cast<int64_t>(o.tokens.size());
      outs.push_back(token_ids(o));
    }
    return std::pair{static_cast<double>(tokens) / (now() - t0), std::move(outs)};
  };
  // Rounds of off then on, each figure the best of its rounds (as the step costs are the least
  // of several runs): one run each moved the ratio by 2x and more on a shared machine.
  double best_off = 0, best_on = 0;
  bool identical = true;
  for (int32_t round = 0; round < kConfirmRounds; ++round) {
    auto off = run(false);
    if (!off) return off.error();
    auto on = run(true);
    if (!on) return on.error();
    best_off = std::max(best_off, off->first);
    best_on = std::max(best_on, on->first);
    identical = identical && off->second == on->second;
  }
  c.confirmed_off = best_off;
  c.confirmed_on = best_on;
  c.outputs_identical = identical;
  return Status::ok();
}

void rank(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.refused.empty() != b.refused.empty()) return a.refused.empty();
    if (a.confirmed_on.has_value() != b.confirmed_on.has_value()) return a.confirmed_on.has_value();
    if (a.confirmed_on && b.confirmed_on) {
      const double ra = *a.confirmed_on / *a.confirmed_off, rb = *b.confirmed_on / *b.confirmed_off;
      if (ra != rb) return ra > rb;
    }
    const double sa = a.speedup.empty() ? 0 : a.speedup[0], sb = b.speedup.empty() ? 0 : b.speedup[0];
    if (sa != sb) return sa > sb;
    return a.acceptance > b.acceptance;
  });
}

}  // namespace sluice::pair
