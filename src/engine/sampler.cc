// Sampler implementation. See sampler.h for the pipeline and its documented choices.
//
// Each step writes the penalized logits z' into a scratch row (penalize(): the logits with NaN
// as -inf and its maximum in one vectorized pass, then the penalized value of each distinct
// context token, a small vector sorted by id, written over its logit); every later pass reads
// that row: the maximum and argmax, the log-sum-exp (a vectorized exp into a second row, summed
// in a fixed order: 8 partial sums per block of 1024, blocks in double), top-n.
//
// The temperature path computes p = exp((z' - max z') / T) for the whole row (vectorized; p == 1
// for the most likely token, and tokens whose p underflows to 0 could never be drawn). Without
// filters the race runs over that row directly. Otherwise candidates (id, p > 0) are collected:
// top-k by a bounded heap over the row, then sorted. Candidate order is p descending, ties by id:
// a strict total order, so "the k best" and "the nucleus" are defined independently of any
// algorithm. Top-p's cut is found by a weighted quickselect (find_crossing) instead of a sort, so
// a flat distribution costs expected O(vocab) too; the draw is an exponential race (race_over()),
// whose winner does not depend on the order at all. Sums are in double, in an order fixed by this
// file (not by std algorithms).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"
#include "kernels/ops.h"

namespace sluice {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

inline float clean(float x) { return std::isnan(x) ? -kInf : x; }

// Higher logit first, then lower id.
inline bool ranks_before(int32_t a_id, float a, int32_t b_id, float b) {
  return a > b || (a == b && a_id < b_id);
}

inline bool candidate_before(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return ranks_before(a.token_id, a.p, b.token_id, b.p);
}

// sum p[0..n) in a fixed order: 8 partial float sums per block of 1024, then the blocks in double.
double fixed_sum(const float* p, size_t n) {
  double total = 0.0;
  for (size_t b = 0; b < n; b += 1024) {
    const size_t e = std::min(n, b + 1024);
    float acc[8] = {};
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
    }
    float block = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < e; ++i) block += p[i];
    total += block;
  }
  return total;
}

// log_softmax at temperature 1 over the penalized logits.
struct LogSoftmax {
  float max = -kInf;
  int32_t argmax = 0;     // lowest id among the maxima
  int32_t num_max_inf = 0;  // tokens at +inf (they share all the mass)
  double log_sum = 0.0;   // log(sum exp(z - max)) when max is finite

  float logprob(float z) const {
    if (max == kInf) return z == kInf ? -std::log(static_cast<float>(num_max_inf)) : -kInf;
    return static_cast<float>(static_cast<double>(z) - max - log_sum);
  }
};

// The lowest id holding the maximum `max` of z (0 when max is -inf).
int32_t first_max(std::span<const float> z, float max) {
  for (size_t i = 0; i < z.size(); ++i) {
    if (z[i] == max) return static_cast<int32_t>(i);
  }
  return 0;
}

// `scratch` receives exp(z - max).
LogSoftmax compute_log_softmax(std::span<const float> z, float max, std::vector<float>& scratch) {
  LogSoftmax ls;
  ls.max = max;
  ls.argmax = first_max(z, max);
  if (max == kInf) {
    ls.num_max_inf = static_cast<int32_t>(std::count(z.begin(), z.end(), kInf));
  } else if (max != -kInf) {
    scratch.resize(z.size());
    kernels::exp_scaled(z.data(), static_cast<int64_t>(z.size()), max, 1.0f, scratch.data());
    ls.log_sum = std::log(fixed_sum(scratch.data(), scratch.size()));
  }
  return ls;
}

// The n most likely tokens with p > 0, logprob descending, ties by id. O(vocab * n) worst
// case, O(vocab) typically: most tokens lose against the current n-th best.
std::vector<TokenLogprob> top_n(std::span<const float> z, int32_t n, const LogSoftmax& ls) {
  std::vector<Sampler::Override> best;  // sorted by ranks_before
  best.reserve(n + 1);
  for (size_t i = 0; i < z.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (z[i] == -kInf) continue;
    if (static_cast<int32_t>(best.size()) == n && !ranks_before(id, z[i], best.back().token_id, best.back().logit)) {
      continue;
    }
    auto pos = best.end();
    while (pos != best.begin() && ranks_before(id, z[i], (pos - 1)->token_id, (pos - 1)->logit)) --pos;
    best.insert(pos, {id, z[i]});
    if (static_cast<int32_t>(best.size()) > n) best.pop_back();
  }
  std::vector<TokenLogprob> top;
  top.reserve(best.size());
  for (const Sampler::Override& b : best) {
    const float logprob = ls.logprob(b.logit);
    if (logprob == -kInf) break;  // p == 0: z' finite but a +inf token takes all the mass
    top.push_back({b.token_id, logprob});
  }
  return top;
}

// The exponential race over the candidates that each(f) lists as f(id, p), p > 0: token x takes
// -log(U_x) / p_x with U_x uniform in (0, 1), the output of a SplitMix64 stream keyed by the draw
// at position x's id; the least time wins (ties: the lower id), token x with probability
// p_x / sum p (the Gumbel-max trick, in exponential form). The winner does not depend on the
// candidates' order, and a sampler with other probabilities q but the same key picks the same
// token with probability sum_x 1 / sum_y max(p_y/p_x, q_y/q_x): near 1 when q is near p (a
// draft model's copy of this sampler, draft_model_proposer.h). Cost: one hash a candidate; the
// logarithm only for those that can still win (-log u > 1 - u).
template <typename Each>
int32_t race_over(uint64_t key, Each each) {
  double best = std::numeric_limits<double>::infinity();
  int32_t winner = -1;
  each([&](int32_t id, float p) {
    uint64_t state = key + static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ULL;
    const double u = (static_cast<double>(Xoshiro256::splitmix64(state) >> 11) + 0.5) * 0x1.0p-53;
    if (1.0 - u >= best * p) return;  // cannot win
    const double t = -std::log(u) / p;
    if (t < best || (t == best && id < winner)) {
      best = t;
      winner = id;
    }
  });
  return winner;
}

struct Crossing {
  size_t idx;          // position of the crossing candidate after find_crossing()
  double mass_before;  // total p of the candidates ranked before it, all in [0, idx)
};

// Inverse CDF without sorting: the candidate x of `c` at which the cumulative mass in
// candidate order first exceeds `target` (or reaches it, if `inclusive`), by weighted
// quickselect, expected O(n). Permutes `c` so that [0, idx) holds exactly the candidates
// ranked before x. Pivots come from a fixed generator and partitions are written here, so
// the permutation and every sum are the same on every standard library. If rounding leaves
// the target beyond the total, the last candidate is taken.
// REQUIRES: !c.empty().
Crossing find_crossing(std::span<Sampler::Candidate> c, double target, bool inclusive) {
  auto crosses = [&](double cum) { return inclusive ? cum >= target : cum > target; };
  uint64_t pivot_state = 0x5eed;
  size_t lo = 0, hi = c.size();
  double acc = 0.0;  // mass of [0, lo), all ranked before [lo, hi)
  while (hi - lo > 16) {
    // Median of three pseudo-random positions, moved to hi - 1.
    size_t pick[3];
    for (size_t& k : pick) k = lo + Xoshiro256::splitmix64(pivot_state) % (hi - lo);
    auto before = [&](size_t a, size_t b) { return candidate_before(c[a], c[b]); };
    if (before(pick[1], pick[0])) std::swap(pick[0], pick[1]);
    if (before(pick[2], pick[1])) std::swap(pick[1], pick[2]);
    if (before(pick[1], pick[0])) std::swap(pick[0], pick[1]);
    std::swap(c[pick[1]], c[hi - 1]);
    const Sampler::Candidate pivot = c[hi - 1];
    size_t mid = lo;
    double mass = 0.0;
    for (size_t j = lo; j + 1 < hi; ++j) {
      if (candidate_before(c[j], pivot)) {
        mass += c[j].p;
        std::swap(c[mid++], c[j]);
      }
    }
    std::swap(c[mid], c[hi - 1]);
    if (crosses(acc + mass)) {
      hi = mid;  // in the part ranked before the pivot, which c[mid] follows
      continue;
    }
    acc += mass;
    if (crosses(acc + pivot.p)) return {mid, acc};
    acc += pivot.p;
    lo = mid + 1;
  }
  std::sort(c.begin() + lo, c.begin() + hi, candidate_before);
  for (size_t i = lo; i < hi; ++i) {
    if (crosses(acc + c[i].p)) return {i, acc};
    acc += c[i].p;
  }
  // Rounding: c[hi] (or the last candidate) follows everything in [0, hi).
  const size_t idx = std::min(hi, c.size() - 1);
  double mass_before = 0.0;
  for (size_t i = 0; i < idx; ++i) mass_before += c[i].p;
  return {idx, mass_before};
}

// NOTE: no usable logit at all (a broken model or every token masked). Rather than abort,
// the step is defined as the uniform distribution, whose argmax with ties -> lowest id is 0.
// Uniform over the tokens not `excluded` (sorted ids; the suppressed ones): the lowest id is
// the token. Everything excluded: uniform over the whole vocabulary.
SampleResult uniform_fallback(size_t vocab, int32_t num_top, std::span<const int32_t> excluded) {
  auto in_range = [&](int32_t id) { return id >= 0 && static_cast<size_t>(id) < vocab; };
  const size_t num_excluded = static_cast<size_t>(std::count_if(excluded.begin(), excluded.end(), in_range));
  if (num_excluded == vocab) excluded = {};
  const size_t allowed = vocab - (excluded.empty() ? 0 : num_excluded);
  const float logprob = -std::log(static_cast<float>(allowed));
  SampleResult result{-1, logprob, {}};
  const size_t n = std::min<size_t>(static_cast<size_t>(num_top), allowed);
  for (int32_t id = 0; static_cast<size_t>(id) < vocab && (result.token_id < 0 || result.top.size() < n); ++id) {
    if (std::binary_search(excluded.begin(), excluded.end(), id)) continue;
    if (result.token_id < 0) result.token_id = id;
    if (result.top.size() < n) result.top.push_back({id, logprob});
  }
  return result;
}

}  // namespace

SampleResult TokenScorer::score(std::span<const float> logits, int32_t token_id, int32_t top_logprobs) {
  SLUICE_CHECK(!logits.empty()) << "score() needs at least one logit";
  const auto n = static_cast<int64_t>(logits.size());
  std::vector<float>& z = z_;
  z.resize(logits.size());
  bool nan_logits = false;
  const float max = kernels::clean_max(logits.data(), n, z.data(), &nan_logits);
  const LogSoftmax ls = compute_log_softmax(z, max, p_);
  if (ls.max == -kInf) {
    SampleResult r = uniform_fallback(logits.size(), top_logprobs, {});
    r.token_id = token_id;
    r.nan_logits = nan_logits;
    return r;
  }
  SampleResult result{token_id, -kInf, {}};
  if (token_id >= 0 && token_id < n) result.logprob = ls.logprob(z[token_id]);
  if (top_logprobs > 0) result.top = top_n(z, top_logprobs, ls);
  result.nan_logits = nan_logits;
  return result;
}

Status SamplingParams::validate() const {
  // Written as !(in range) so that NaN fails too.
  auto fail = [](std::string message) { return Status::error(std::move(message)); };
  if (!(temperature >= 0.0f && temperature <= 2.0f)) {
    return fail(fmt::format("temperature must be in [0, 2], got {}", temperature));
  }
  if (top_k < 0) return fail(fmt::format("top_k must be >= 0 (0 disables it), got {}", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return fail(fmt::format("top_p must be in (0, 1], got {}", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return fail(fmt::format("min_p must be in [0, 1], got {}", min_p));
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return fail(fmt::format("repetition_penalty must be a finite number > 0 (1 disables it), got {}",
                            repetition_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return fail(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return fail(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  if (top_logprobs < 0 || top_logprobs > 20) {
    return fail(fmt::format("top_logprobs must be in [0, 20], got {}", top_logprobs));
  }
  return Status::ok();
}

uint64_t Xoshiro256::splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Xoshiro256::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::next_double() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt_tokens)
    : params_(params), rng_(params.seed) {
  const Status status = params.validate();
  SLUICE_CHECK(status.is_ok()) << status.message();
  if (params_.repetition_penalty != 1.0f) {
    context_ids_.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::sort(context_ids_.begin(), context_ids_.end());
    context_ids_.erase(std::unique(context_ids_.begin(), context_ids_.end()), context_ids_.end());
  }
}

void Sampler::suppress_until(std::vector<int32_t> token_ids, int32_t num_outputs) {
  std::sort(token_ids.begin(), token_ids.end());
  token_ids.erase(std::unique(token_ids.begin(), token_ids.end()), token_ids.end());
  suppressed_ = std::move(token_ids);
  suppress_until_ = num_outputs;
}

void Sampler::accept(int32_t token_id) {
  if (constraint_) constraint_->accept(token_id);
  ++num_accepted_;
  ++output_counts_[token_id];
  auto pos = std::lower_bound(context_ids_.begin(), context_ids_.end(), token_id);
  if (pos == context_ids_.end() || *pos != token_id) context_ids_.insert(pos, token_id);
}

bool Sampler::penalties_active() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

void Sampler::build_overrides(std::span<const float> logits) {
  overrides_.clear();
  if (penalties_active()) {
    const float rep = params_.repetition_penalty;
    for (int32_t id : context_ids_) {
      if (id < 0) continue;
      if (id >= static_cast<int32_t>(logits.size())) break;
      float z = clean(logits[id]);
      if (rep != 1.0f) z = z > 0.0f ? z / rep : z * rep;
      if (auto it = output_counts_.find(id); it != output_counts_.end()) {
        z -= params_.presence_penalty;
        z -= params_.frequency_penalty * static_cast<float>(it->second);
      }
      overrides_.push_back({id, z});
    }
  }
  if (num_accepted_ >= suppress_until_ || suppressed_.empty()) return;
  // Merge the suppressed ids (as -inf) into the sorted overrides.
  merged_.clear();
  size_t o = 0;
  for (int32_t id : suppressed_) {
    if (id < 0) continue;
    if (id >= static_cast<int32_t>(logits.size())) break;
    while (o < overrides_.size() && overrides_[o].token_id < id) merged_.push_back(overrides_[o++]);
    if (o < overrides_.size() && overrides_[o].token_id == id) ++o;
    merged_.push_back({id, -kInf});
  }
  while (o < overrides_.size()) merged_.push_back(overrides_[o++]);
  overrides_.swap(merged_);
}

float Sampler::penalize(std::span<const float> logits) {
  const auto n = static_cast<int64_t>(logits.size());
  z_.resize(logits.size());
  float max = kernels::clean_max(logits.data(), n, z_.data(), &nan_logits_);
  build_overrides(logits);
  if (!overrides_.empty()) {
    bool max_overridden = false;
    float max_override = -kInf;
    for (const Override& o : overrides_) {
      max_overridden |= z_[o.token_id] == max;
      z_[o.token_id] = o.logit;
      max_override = std::max(max_override, o.logit);
    }
    // A token that held the maximum changed: the maximum must be found again.
    max = max_overridden ? kernels::clean_max(z_.data(), n, z_.data()) : std::max(max, max_override);
  }
  if (!constraint_) return max;
  // Masked tokens out, 64 at a time; then the maximum of what is left.
  const std::shared_ptr<const TokenMask> mask = constraint_->allowed();
  for (size_t w = 0; w < mask->size(); ++w) {
    const uint64_t bits = (*mask)[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(z_.size(), (w + 1) * 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) z_[i] = -kInf;
    }
  }
  for (size_t i = mask->size() * 64; i < z_.size(); ++i) z_[i] = -kInf;  // ids past the vocabulary
  return kernels::clean_max(z_.data(), n, z_.data());
}

SampleResult Sampler::sample(std::span<const float> logits) {
  SLUICE_CHECK(!logits.empty()) << "sample() needs at least one logit";
  SLUICE_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      << "vocab too large: " << logits.size();
  const bool greedy = params_.temperature == 0.0f;
  const float max = penalize(logits);  // first: it sizes z_ (argument order is unspecified)
  const LogSoftmax ls = compute_log_softmax(z_, max, p_);
  if (ls.max == -kInf) {
    if (!greedy) rng_.next();  // keep later steps' draws where they would be
    const bool suppressing = num_accepted_ < suppress_until_;
    SampleResult result =
        uniform_fallback(logits.size(), params_.top_logprobs,
                         suppressing ? std::span<const int32_t>(suppressed_) : std::span<const int32_t>());
    result.nan_logits = nan_logits_;
    return result;
  }
  SampleResult result;
  result.token_id = greedy ? ls.argmax : sample_candidates(ls.max);
  result.logprob = ls.logprob(z_[result.token_id]);
  if (params_.top_logprobs > 0) result.top = top_n(z_, params_.top_logprobs, ls);
  result.nan_logits = nan_logits_;
  return result;
}

int32_t Sampler::pick(std::span<const float> logits) {
  SLUICE_CHECK(!logits.empty()) << "pick() needs at least one logit";
  const bool greedy = params_.temperature == 0.0f;
  const float max = penalize(logits);
  if (max == -kInf) {
    if (!greedy) rng_.next();
    const bool suppressing = num_accepted_ < suppress_until_;
    return uniform_fallback(logits.size(), 0,
                            suppressing ? std::span<const int32_t>(suppressed_) : std::span<const int32_t>())
        .token_id;
  }
  return greedy ? first_max(z_, max) : sample_candidates(max);
}

// REQUIRES: z_ holds the penalized logits, max_logit their maximum, not -inf.
int32_t Sampler::sample_candidates(float max_logit) {
  const size_t n = z_.size();
  const uint64_t key = rng_.next();
  const size_t top_k = static_cast<size_t>(params_.top_k);
  const bool filtered = top_k > 0 || params_.top_p < 1.0f || params_.min_p > 0.0f;
  candidates_.clear();
  if (max_logit == kInf) {
    for (size_t i = 0; i < n; ++i) {
      if (z_[i] == kInf) candidates_.push_back({static_cast<int32_t>(i), 1.0f});
    }
  } else {
    p_.resize(n);
    kernels::exp_scaled(z_.data(), static_cast<int64_t>(n), max_logit, 1.0f / params_.temperature, p_.data());
    if (!filtered) {
      return race_over(key, [&](auto&& f) {
        for (size_t i = 0; i < n; ++i) {
          if (p_[i] > 0.0f) f(static_cast<int32_t>(i), p_[i]);
        }
      });
    }
    if (top_k > 0 && top_k < n) {
      // The k best by a bounded heap whose front is the worst kept (the last in candidate order).
      for (size_t i = 0; i < n; ++i) {
        const Candidate c{static_cast<int32_t>(i), p_[i]};
        if (c.p <= 0.0f) continue;
        if (candidates_.size() < top_k) {
          candidates_.push_back(c);
          std::push_heap(candidates_.begin(), candidates_.end(), candidate_before);
        } else if (candidate_before(c, candidates_.front())) {
          std::pop_heap(candidates_.begin(), candidates_.end(), candidate_before);
          candidates_.back() = c;
          std::push_heap(candidates_.begin(), candidates_.end(), candidate_before);
        }
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        if (p_[i] > 0.0f) candidates_.push_back({static_cast<int32_t>(i), p_[i]});
      }
    }
  }
  std::span<Candidate> kept(candidates_);
  bool selected = max_logit != kInf && top_k > 0 && top_k < n;  // by the heap
  if (top_k > 0 && top_k < kept.size()) {
    std::nth_element(kept.begin(), kept.begin() + top_k, kept.end(), candidate_before);
    kept = kept.first(top_k);
    selected = true;
  }
  // NOTE: the heap and nth_element leave a library-specific order; sorting makes the summation
  // order below, and so every rounding, the same everywhere.
  if (selected) std::sort(kept.begin(), kept.end(), candidate_before);
  if (params_.top_p < 1.0f) {
    double kept_mass = 0.0;
    for (const Candidate& c : kept) kept_mass += c.p;
    const double nucleus = static_cast<double>(params_.top_p) * kept_mass;
    const Crossing cut = find_crossing(kept, nucleus, /*inclusive=*/true);
    kept = kept.first(cut.idx + 1);
  }
  if (params_.min_p > 0.0f) {  // p_max == 1, so the threshold is min_p itself
    size_t num_kept = 0;
    for (const Candidate& c : kept) {
      if (c.p < params_.min_p) continue;
      kept[num_kept++] = c;
    }
    kept = kept.first(num_kept);
  }
  SLUICE_CHECK(!kept.empty()) << "the most likely token always survives the filters";
  return race_over(key, [&](auto&& f) {
    for (const Candidate& c : kept) f(c.token_id, c.p);
  });
}

}  // namespace sluice
