// Predicted outputs (OpenAI's `prediction: {"type": "content", ...}`): the client sends the text
// it expects (the old version of a file it asks to edit, say) and its tokens are the drafts.
//
// Alignment, per sequence: a cursor into the prediction's tokens. While the output keeps
// matching the prediction at the cursor, the cursor moves with it and the drafts are the next
// prediction tokens. When the output departs (an edit), the drafts stop until the output's last
// tokens (the longest of kAlignTokens down to 1) occur in the prediction again, searched from
// the cursor on first, then anywhere; the cursor moves past that occurrence.
#pragma once

#include <unordered_map>

#include "engine/spec/proposer.h"

namespace sluice::spec {

class PredictionProposer : public Proposer {
 public:
  static constexpr int32_t kAlignTokens = 8;

  // The output tokens that came from the prediction: walking the output token by token with
  // the alignment above, those equal to the prediction's token at the cursor. What OpenAI's
  // usage calls accepted_prediction_tokens; unlike the drafts verified, it does not depend on
  // how many tokens each step drafted, so the same answer always counts the same.
  static int64_t tokens_from_prediction(std::span<const int32_t> prediction, std::span<const int32_t> output);

  std::string_view name() const override { return "prediction"; }
  void add_sequence(SeqId seq_id, const Request& request) override;
  void remove_sequence(SeqId seq_id) override { seqs_.erase(seq_id); }
  void propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) override;

 private:
  struct State {
    std::vector<int32_t> prediction;
    int64_t cursor = 0;      // prediction index aligned with the end of the output
    int64_t num_output = 0;  // output length at that alignment
  };
  static void align(State& s, std::span<const int32_t> output);
  std::unordered_map<SeqId, State> seqs_;
};

}  // namespace sluice::spec
