// Sampler implementation. See sampler.h for the pipeline and its documented choices.
//
// Penalties touch only tokens of the context, so they are not written into a copy of the
// logits: build_overrides() computes the penalized logit of each distinct context token
// (a small vector sorted by id) and for_each_logit() walks the vocabulary in id order,
// substituting those. Every pass over the vocabulary goes through it.
//
// The temperature path keeps candidates (id, p) with p = exp((z' - max z') / T) in float:
// p <= 1, p == 1 for the most likely token, and tokens whose p underflows to 0 are dropped
// (they could never be drawn). Walking "in probability order" sorts lazily: ensure_sorted(n)
// sorts a head of the candidates that grows geometrically (nth_element + sort of the head
// only), so a peaked distribution costs O(vocab) and only a flat one pays for a longer sort.
// The comparator is a strict total order (p descending, id ascending), so the order walked
// does not depend on the standard library's algorithms; sums are in double, taken in id order
// or walk order, both fixed.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.h"

namespace sluice {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

inline float clean(float x) { return std::isnan(x) ? -kInf : x; }

// Calls f(token_id, z') for every token in id order: raw logits (NaN as -inf) with the
// penalized values of `overrides` (sorted by id, all in range) substituted.
template <typename F>
inline void for_each_logit(std::span<const float> logits,
                           std::span<const Sampler::Override> overrides, F&& f) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  int32_t i = 0;
  for (const Sampler::Override& o : overrides) {
    for (; i < o.token_id; ++i) f(i, clean(logits[i]));
    f(o.token_id, o.logit);
    i = o.token_id + 1;
  }
  for (; i < vocab; ++i) f(i, clean(logits[i]));
}

// Higher logit first, then lower id.
inline bool ranks_before(int32_t a_id, float a, int32_t b_id, float b) {
  return a > b || (a == b && a_id < b_id);
}

inline bool candidate_before(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return ranks_before(a.token_id, a.p, b.token_id, b.p);
}

// log_softmax at temperature 1 over the penalized logits.
struct LogSoftmax {
  float max = -kInf;
  int32_t argmax = 0;     // lowest id among the maxima
  int32_t num_max_inf = 0;  // tokens at +inf (they share all the mass)
  double log_sum = 0.0;   // log(sum exp(z' - max)) when max is finite

  float logprob(float z) const {
    if (max == kInf) return z == kInf ? -std::log(static_cast<float>(num_max_inf)) : -kInf;
    return static_cast<float>(static_cast<double>(z) - max - log_sum);
  }
};

LogSoftmax compute_log_softmax(std::span<const float> logits,
                               std::span<const Sampler::Override> overrides) {
  LogSoftmax ls;
  for_each_logit(logits, overrides, [&](int32_t id, float z) {
    if (z > ls.max) {
      ls.max = z;
      ls.argmax = id;
    }
    if (z == kInf) ++ls.num_max_inf;
  });
  if (std::isfinite(ls.max)) {
    double sum = 0.0;
    const float max = ls.max;
    for_each_logit(logits, overrides, [&](int32_t, float z) { sum += std::exp(z - max); });
    ls.log_sum = std::log(sum);
  }
  return ls;
}

// The n most likely tokens with p > 0, logprob descending, ties by id. O(vocab * n) worst
// case, O(vocab) typically: most tokens lose against the current n-th best.
std::vector<TokenLogprob> top_n(std::span<const float> logits,
                                std::span<const Sampler::Override> overrides, int32_t n,
                                const LogSoftmax& ls) {
  std::vector<Sampler::Override> best;  // sorted by ranks_before
  best.reserve(n + 1);
  for_each_logit(logits, overrides, [&](int32_t id, float z) {
    if (z == -kInf) return;
    if (static_cast<int32_t>(best.size()) == n &&
        !ranks_before(id, z, best.back().token_id, best.back().logit)) {
      return;
    }
    auto pos = best.end();
    while (pos != best.begin() && ranks_before(id, z, (pos - 1)->token_id, (pos - 1)->logit)) {
      --pos;
    }
    best.insert(pos, {id, z});
    if (static_cast<int32_t>(best.size()) > n) best.pop_back();
  });
  std::vector<TokenLogprob> top;
  top.reserve(best.size());
  for (const Sampler::Override& b : best) {
    const float logprob = ls.logprob(b.logit);
    if (logprob == -kInf) break;  // p == 0: z' finite but a +inf token takes all the mass
    top.push_back({b.token_id, logprob});
  }
  return top;
}

// NOTE: no usable logit at all (a broken model or every token masked). Rather than abort,
// the step is defined as the uniform distribution, whose argmax with ties -> lowest id is 0.
SampleResult uniform_fallback(size_t vocab, int32_t num_top) {
  const float logprob = -std::log(static_cast<float>(vocab));
  SampleResult result{0, logprob, {}};
  const int32_t n = static_cast<int32_t>(std::min<size_t>(num_top, vocab));
  for (int32_t id = 0; id < n; ++id) result.top.push_back({id, logprob});
  return result;
}

}  // namespace

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

void Sampler::accept(int32_t token_id) {
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
  if (!penalties_active()) return;
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

SampleResult Sampler::sample(std::span<const float> logits) {
  SLUICE_CHECK(!logits.empty()) << "sample() needs at least one logit";
  SLUICE_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      << "vocab too large: " << logits.size();
  const bool greedy = params_.temperature == 0.0f;
  build_overrides(logits);
  const LogSoftmax ls = compute_log_softmax(logits, overrides_);
  if (ls.max == -kInf) {
    if (!greedy) rng_.next_double();  // keep later steps' draws where they would be
    return uniform_fallback(logits.size(), params_.top_logprobs);
  }

  SampleResult result;
  result.token_id = greedy ? ls.argmax : sample_candidates(logits, ls.max);
  float z = clean(logits[result.token_id]);
  auto it = std::lower_bound(overrides_.begin(), overrides_.end(), result.token_id,
                             [](const Override& o, int32_t id) { return o.token_id < id; });
  if (it != overrides_.end() && it->token_id == result.token_id) z = it->logit;
  result.logprob = ls.logprob(z);
  if (params_.top_logprobs > 0) {
    result.top = top_n(logits, overrides_, params_.top_logprobs, ls);
  }
  return result;
}

void Sampler::ensure_sorted(size_t n) {
  if (n <= num_sorted_) return;
  const auto begin = candidates_.begin();
  const size_t size = candidates_.size();
  const size_t head = std::min(size, std::max({n, num_sorted_ * 4, size_t{256}}));
  if (head < size) std::nth_element(begin + num_sorted_, begin + head, candidates_.end(),
                                    candidate_before);
  std::sort(begin + num_sorted_, begin + head, candidate_before);
  num_sorted_ = head;
}

// REQUIRES: max_logit is the maximum penalized logit and is not -inf.
int32_t Sampler::sample_candidates(std::span<const float> logits, float max_logit) {
  candidates_.clear();
  num_sorted_ = 0;
  if (max_logit == kInf) {
    for_each_logit(logits, overrides_, [&](int32_t id, float z) {
      if (z == kInf) candidates_.push_back({id, 1.0f});
    });
  } else {
    const float temperature = params_.temperature;
    for_each_logit(logits, overrides_, [&](int32_t id, float z) {
      const float p = std::exp((z - max_logit) / temperature);
      if (p > 0.0f) candidates_.push_back({id, p});
    });
  }
  const size_t top_k = static_cast<size_t>(params_.top_k);
  if (top_k > 0 && top_k < candidates_.size()) {
    std::nth_element(candidates_.begin(), candidates_.begin() + top_k, candidates_.end(),
                     candidate_before);
    candidates_.resize(top_k);
  }
  if (top_k > 0) ensure_sorted(candidates_.size());

  // Which head of the candidate order survives top-p and min-p, and its mass.
  const float min_p = params_.min_p;  // p_max == 1
  size_t num_kept = 0;
  double kept_mass = 0.0;
  if (params_.top_p < 1.0f) {
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.p;
    const double nucleus = static_cast<double>(params_.top_p) * total;
    while (num_kept < candidates_.size() && kept_mass < nucleus) {
      ensure_sorted(num_kept + 1);
      const float p = candidates_[num_kept].p;
      if (p < min_p) break;
      kept_mass += p;
      ++num_kept;
    }
  } else {
    for (const Candidate& c : candidates_) {
      if (c.p < min_p) continue;
      kept_mass += c.p;
      ++num_kept;
    }
  }
  SLUICE_CHECK(num_kept > 0) << "the most likely token always survives the filters";

  // Inverse CDF in candidate order.
  const double target = rng_.next_double() * kept_mass;
  double cum = 0.0;
  for (size_t i = 0; i < num_kept; ++i) {
    ensure_sorted(i + 1);
    cum += candidates_[i].p;
    if (target < cum) return candidates_[i].token_id;
  }
  return candidates_[num_kept - 1].token_id;  // rounding left target just above the sum
}

}  // namespace sluice
