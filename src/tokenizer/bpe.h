// BpeModel: byte-level BPE encoding with merge ranks (tokenizer.ggml.model = "gpt2").
//
// Algorithm, for one pre-tokenized word of raw bytes:
//   1. every byte starts as one symbol: the token of its byte-level character (byte_level.h);
//   2. all adjacent symbol pairs that have a merge go into a priority queue keyed by merge
//      rank (lowest first; ties: leftmost first); the best is merged into the merge's result
//      token and the pairs it forms with its neighbours are queued. Stale entries (a side
//      changed meanwhile) are skipped when popped;
//   3. the final symbols are the tokens.
// Merges are held as (left id, right id) -> (rank, result id), so no string is built while
// encoding. With ignore_merges (Llama 3), a word that is itself a token is emitted whole.
//
// Immutable after create(); safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/vocab.h"

namespace sluice {

class BpeModel {
 public:
  // `merges` are "left right" strings in rank order (tokenizer.ggml.merges). A merge whose
  // parts or result are not tokens cannot fire and is skipped; a merge without a space is
  // an error. REQUIRES: `vocab` outlives the model.
  static Result<BpeModel> create(const Vocab& vocab, std::span<const std::string_view> merges,
                                 bool ignore_merges);

  // Appends the tokens of one pre-tokenized word (raw bytes) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  int32_t num_merges() const { return static_cast<int32_t>(merges_.size()); }
  // The token of byte `b`'s byte-level character, or -1.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result_id;
  };
  explicit BpeModel(const Vocab& vocab) : vocab_(&vocab) {}
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  const Merge* find_merge(int32_t left, int32_t right) const;

  const Vocab* vocab_;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_tokens_{};
  std::unordered_map<uint64_t, Merge> merges_;
};

}  // namespace sluice
