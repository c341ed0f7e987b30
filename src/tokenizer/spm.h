// SpmModel: SentencePiece-style encoding with scores (tokenizer.ggml.model = "llama"),
// following llama.cpp's llm_tokenizer_spm.
//
// Algorithm, for one fragment of raw text:
//   1. every space becomes U+2581 '▁' (the caller has already put one in front when the
//      vocabulary wants a space prefix);
//   2. every UTF-8 character starts as one symbol;
//   3. all adjacent pairs whose concatenation is a token go into a priority queue keyed by
//      that token's score (highest first; ties: leftmost first); the best pair is merged,
//      and the pairs it forms with its new neighbours are queued. Stale entries (a side was
//      merged away meanwhile) are skipped when popped;
//   4. each final symbol is emitted as its token; a symbol that is not a token (a character
//      missing from the vocabulary) is emitted byte by byte as "<0xNN>" tokens, or as the
//      unknown token when the vocabulary has no byte tokens.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmModel {
 public:
  // REQUIRES: `vocab` outlives this model.
  explicit SpmModel(const Vocab& vocab);

  // Appends the tokens of `text` (raw text, spaces not yet escaped) to `out`.
  // REQUIRES: `text` is valid UTF-8.
  void encode(std::string_view text, std::vector<int32_t>& out) const;

  // The token for raw byte `b`: "<0xNN>", else the unknown token, else -1.
  int32_t byte_token(uint8_t b) const { return byte_tokens_[b]; }

 private:
  const Vocab& vocab_;
  std::array<int32_t, 256> byte_tokens_{};
};

// Text with every ' ' replaced by U+2581.
std::string spm_escape_spaces(std::string_view text);

}  // namespace sluice
