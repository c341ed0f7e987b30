// Prompt lookup (Saxena, "Prompt Lookup Decoding", 2023; vLLM's and llama.cpp's n-gram
// speculation): the drafts continue the most recent earlier occurrence of the sequence's last n
// tokens in its own prompt and output, for the longest n in [min_n, max_n] that occurs. Costs no
// model: it pays off where the output repeats its context (code edits, extraction, summaries
// that quote).
#pragma once

#include "engine/spec/proposer.h"

namespace sluice::spec {

class NgramProposer : public Proposer {
 public:
  // REQUIRES: 1 <= min_n <= max_n.
  NgramProposer(int32_t min_n, int32_t max_n);
  std::string_view name() const override { return "ngram"; }
  void propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) override;

  // The continuation (at most max_tokens) of the most recent earlier match of the last n
  // tokens, longest n first; empty if none. Exposed for tests.
  static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                                     int32_t max_tokens);

 private:
  int32_t min_n_, max_n_;
};

}  // namespace sluice::spec
