// Test helpers: the shared conformance vocabularies and small hand-made vocabularies.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace sluice::testing {

// SLUICE_SHARED_DIR "/tokenizer".
std::string shared_tokenizer_dir();

// The tokenizer of SLUICE_SHARED_DIR/tokenizer/NAME.gguf, loaded once per test binary;
// nullptr when the file is absent (tests then GTEST_SKIP). Fails the test on a load error.
const Tokenizer* shared_tokenizer(std::string_view name);

// Loads a tokenizer from the metadata written into `w` (Writer -> bytes -> File).
Result<std::unique_ptr<Tokenizer>> tokenizer_from_writer(const gguf::Writer& w);

// A tiny SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then `pieces` with
// the given scores (normal tokens).
gguf::Writer tiny_spm_writer(const std::vector<std::pair<std::string, float>>& pieces);

// A tiny byte-level BPE vocabulary: the 256 byte tokens, then one token per merge, then
// "<|endoftext|>" (control, BOS/EOS) and "<tool>" (user-defined). `merges` are raw text
// pairs (converted to byte-level form here), in rank order.
gguf::Writer tiny_bpe_writer(const std::vector<std::pair<std::string, std::string>>& merges,
                             std::string_view pre = "gpt2");

}  // namespace sluice::testing
