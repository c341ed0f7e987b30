#include "engine/spec/ngram_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace sluice::spec {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {
  SLUICE_CHECK(1 <= min_n && min_n <= max_n) << min_n << ".." << max_n;
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                                           int32_t max_tokens) {
  const auto len = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(len - n);
    // Latest start i with a continuation: i + n <= len - 1.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(len, from + max_tokens);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) {
  out.resize(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) out[i] = lookup(queries[i].tokens, min_n_, max_n_, queries[i].max_tokens);
}

}  // namespace sluice::spec
