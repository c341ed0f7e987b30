#include "engine/spec/draft_length.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <queue>

namespace sluice::spec {
int64_t DraftLength::bucket(int64_t n) {
  if (n <= 128) return std::max<int64_t>(1, n);
  // 8 buckets an octave: n rounded down to 3 significant bits.
  const int shift = std::bit_width(static_cast<uint64_t>(n)) - 4;
  return (n >> shift) << shift;
}

void DraftLength::observe(Table& table, int64_t n, double seconds) {
  if (!(seconds > 0) || n < 1) return;
  auto [it, fresh] = table.try_emplace(bucket(n), Timing{seconds, 0});
  if (!fresh) it->second.seconds = (1 - kStepWeight) * it->second.seconds + kStepWeight * seconds;
  it->second.at = ++num_observed_;
}

void DraftLength::observe_step(int32_t num_tokens, int32_t num_logits, double seconds) {
  if (num_logits == num_tokens) observe(step_seconds_, num_tokens, seconds);
}

void DraftLength::observe_draft_pass(int32_t num_seqs, double seconds) { observe(draft_seconds_, num_seqs, seconds); }

void DraftLength::observe_verify(SeqId seq_id, std::string_view proposer, int32_t k, int32_t accepted) {
  auto update = [&](Rate& r, double decay) {
    r.accepted = decay * r.accepted + accepted;
    r.rejected = decay * r.rejected + (accepted < k ? 1 : 0);
  };
  auto [it, fresh] = seqs_.try_emplace(seq_id);
  Rate& global = proposers_[std::string(proposer)];
  if (fresh) it->second = {global.accepted * 0.1, global.rejected * 0.1};  // a prior worth a few steps
  update(it->second, kDecay);
  update(global, 0.99);
}

void DraftLength::observe_outcome(int32_t num_seqs, int32_t num_drafts, int32_t num_emitted, double seconds) {
  if (!(seconds > 0) || num_seqs < 1) return;
  Outcome& o = outcomes_[bucket(num_seqs)];
  const double rate = num_emitted / seconds;
  double& avg = num_drafts > 0 ? o.with_drafts : o.without;
  int32_t& n = num_drafts > 0 ? o.num_with : o.num_without;
  avg = n == 0 ? rate : (1 - kOutcomeWeight) * avg + kOutcomeWeight * rate;
  ++n;
}

bool DraftLength::allow_drafts(int32_t num_seqs) {
  auto it = outcomes_.find(bucket(std::max(1, num_seqs)));
  if (it == outcomes_.end()) return true;
  Outcome& o = it->second;
  if (o.num_with < kMinOutcomes || o.num_without < kMinOutcomes || o.with_drafts >= o.without) {
    o.vetoed = 0;
    o.explore_every = kExploreFirst;
    return true;
  }
  if (++o.vetoed < o.explore_every) return false;
  o.vetoed = 0;
  o.explore_every = std::min(2 * o.explore_every, kExploreMax);
  return true;
}

double DraftLength::acceptance(SeqId seq_id, std::string_view proposer) const {
  Rate r;
  if (auto it = seqs_.find(seq_id); it != seqs_.end()) {
    r = it->second;
  } else if (auto g = proposers_.find(std::string(proposer)); g != proposers_.end()) {
    r = g->second;
  }
  // With nothing measured: 0.5 (one accepted, one rejected, as a prior).
  return (r.accepted + 1) / (r.accepted + r.rejected + 2);
}

double DraftLength::step_seconds(int64_t num_tokens) const { return estimate(step_seconds_, num_tokens); }

double DraftLength::estimate(const Table& table, int64_t num) {
  if (table.empty()) return 0;  // nothing measured yet
  const auto n = static_cast<double>(std::max<int64_t>(1, num));
  auto hi = table.lower_bound(static_cast<int64_t>(std::ceil(n)));
  if (hi == table.end()) {  // flat up to twice the largest measured, then in proportion
    const auto last = std::prev(hi);
    const double reach = 2.0 * static_cast<double>(last->first);
    return last->second.seconds * std::max(1.0, n / reach);
  }
  if (static_cast<double>(hi->first) == n) return hi->second.seconds;
  if (hi == table.begin()) return hi->second.seconds * n / static_cast<double>(hi->first);
  const auto lo = std::prev(hi);
  const auto x0 = static_cast<double>(lo->first), x1 = static_cast<double>(hi->first);
  return lo->second.seconds + (hi->second.seconds - lo->second.seconds) * (n - x0) / (x1 - x0);
}

std::vector<int32_t> DraftLength::choose(int32_t num_decodes, std::span<const Candidate> candidates,
                                         bool pure_decode) const {
  std::vector<int32_t> k(candidates.size(), 0);
  const int32_t base_tokens = std::max(1, num_decodes);
  // The step without drafts, measured lately, or this step measures it (if it can).
  const auto base = step_seconds_.find(bucket(base_tokens));
  const bool stale = base == step_seconds_.end() || num_observed_ - base->second.at > kFreshSteps;
  if (step_seconds_.empty() || (stale && pure_decode)) return k;
  const double t0 = step_seconds(base_tokens);
  std::vector<double> a(candidates.size());
  // Next gain per candidate: a^(k+1), largest first.
  std::priority_queue<std::pair<double, size_t>> next;
  for (size_t i = 0; i < candidates.size(); ++i) {
    a[i] = acceptance(candidates[i].seq_id, candidates[i].proposer);
    if (candidates[i].max_k > 0) next.push({a[i], i});
  }
  // Tokens the step emits: one per decoding sequence, plus the expected accepted drafts.
  double expected = base_tokens, best_rate = expected / t0;
  int64_t drafts = 0, best_drafts = 0;
  double draft_time = 0;                   // the draft model's passes so far
  std::vector<int32_t> at_depth(1, 0);     // costly candidates drafting at least j
  std::vector<int32_t> cur(candidates.size(), 0);
  std::vector<std::pair<size_t, int32_t>> order;  // (candidate, its k) after each addition
  while (!next.empty()) {
    const auto [gain, i] = next.top();
    next.pop();
    expected += gain;
    ++drafts;
    ++cur[i];
    order.push_back({i, cur[i]});
    if (candidates[i].costly) {
      if (at_depth.size() <= static_cast<size_t>(cur[i])) at_depth.resize(cur[i] + 1, 0);
      const int32_t n = ++at_depth[cur[i]];
      draft_time += estimate(draft_seconds_, n) - (n > 1 ? estimate(draft_seconds_, n - 1) : 0.0);
    }
    const double rate = expected / (step_seconds(base_tokens + drafts) + draft_time);
    if (rate > best_rate) best_rate = rate, best_drafts = drafts;
    if (cur[i] < candidates[i].max_k) next.push({gain * a[i], i});
  }
  for (int64_t j = 0; j < best_drafts; ++j) k[order[j].first] = order[j].second;
  return k;
}

}  // namespace sluice::spec
