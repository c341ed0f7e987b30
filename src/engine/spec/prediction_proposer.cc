#include "engine/spec/prediction_proposer.h"

#include <algorithm>

namespace sluice::spec {

void PredictionProposer::add_sequence(SeqId seq_id, const Request& request) {
  if (!request.prediction_tokens.empty()) seqs_[seq_id].prediction = request.prediction_tokens;
}

void PredictionProposer::align(State& s, std::span<const int32_t> output) {
  const auto len = static_cast<int64_t>(output.size());
  const std::span<const int32_t> p = s.prediction;
  const int64_t grown = len - s.num_output;
  // Still on the prediction: the new output tokens are the ones at the cursor.
  if (grown >= 0 && s.cursor + grown <= static_cast<int64_t>(p.size()) &&
      std::equal(output.begin() + s.num_output, output.end(), p.begin() + s.cursor)) {
    s.cursor += grown;
    s.num_output = len;
    return;
  }
  s.num_output = len;
  const int64_t from = std::min<int64_t>(s.cursor, static_cast<int64_t>(p.size()));
  s.cursor = static_cast<int64_t>(p.size());  // unaligned: nothing to propose until found again
  for (int64_t n = std::min<int64_t>(kAlignTokens, len); n >= 1; --n) {
    const std::span<const int32_t> suffix = output.subspan(len - n);
    auto found = std::search(p.begin() + from, p.end(),
                             suffix.begin(), suffix.end());
    if (found == p.end()) found = std::search(p.begin(), p.end(), suffix.begin(), suffix.end());
    if (found != p.end()) {
      s.cursor = (found - p.begin()) + n;
      return;
    }
  }
}

int64_t PredictionProposer::tokens_from_prediction(std::span<const int32_t> prediction,
                                                   std::span<const int32_t> output) {
  State s;
  s.prediction.assign(prediction.begin(), prediction.end());
  int64_t from_prediction = 0;
  for (size_t t = 0; t < output.size(); ++t) {
    align(s, output.first(t));  // where the cursor stands before token t
    from_prediction += s.cursor < static_cast<int64_t>(prediction.size()) && output[t] == prediction[s.cursor];
  }
  return from_prediction;
}

void PredictionProposer::propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) {
  out.assign(queries.size(), {});
  for (size_t i = 0; i < queries.size(); ++i) {
    auto it = seqs_.find(queries[i].seq_id);
    if (it == seqs_.end()) continue;
    State& s = it->second;
    align(s, queries[i].tokens.subspan(queries[i].num_prompt));
    const int64_t to = std::min<int64_t>(static_cast<int64_t>(s.prediction.size()), s.cursor + queries[i].max_tokens);
    if (s.cursor < to) out[i].assign(s.prediction.begin() + s.cursor, s.prediction.begin() + to);
  }
}

}  // namespace sluice::spec
