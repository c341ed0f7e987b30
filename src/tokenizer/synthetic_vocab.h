// Synthesized byte-level BPE vocabulary, for random-weight test models (`sluice model make`
// without --vocab, the demo model).
//
// Layout of a synthesized vocabulary of n tokens (tokenizer.ggml.model = "gpt2", pre "qwen2"):
//   ids 0..255        one token per byte, in byte order (byte-level characters, byte_level.h)
//   ids 256..n-4      merged tokens: first merges learned by plain BPE training on a small
//                     built-in English corpus, then deterministic fill (an existing token
//                     extended by one letter, chosen by a generator seeded with `seed`)
//   ids n-3..n-1      "<|endoftext|>" (BOS, EOS, padding), "<|im_start|>", "<|im_end|>" (EOT),
//                     all control tokens
// Every merge "a b" joins two earlier tokens into a new one, so any text encodes (bytes are
// always there) and decodes back exactly. The same (vocab_size, seed) always gives the same
// bytes. Building the 151936-token vocabulary takes well under a second.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "gguf/gguf_writer.h"

namespace sluice {

inline constexpr int32_t kSyntheticNumSpecialTokens = 3;
inline constexpr int32_t kSyntheticMinVocabSize = 256 + kSyntheticNumSpecialTokens;

// Writes the tokenizer.ggml.* keys of a synthesized vocabulary into `w`.
// REQUIRES: vocab_size >= kSyntheticMinVocabSize (callers validate user input first).
void write_synthetic_bpe_vocab(gguf::Writer& w, int32_t vocab_size, uint64_t seed);

}  // namespace sluice
