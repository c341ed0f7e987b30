// SpecialTokenSplitter: finds special tokens written out in text, before the text is
// handed to SPM or BPE.
//
// Which tokens count (as in llama.cpp and Hugging Face tokenizers):
//   - control and unknown tokens ("<s>", "<|im_end|>", "<unk>") only when the caller asks
//     (EncodeOptions::parse_special); otherwise their text is encoded like any other text;
//   - user-defined tokens ("<tool_call>" in Qwen2) always: they are added words, not markup.
// Scanning goes left to right and takes the longest token that matches at each position.
//
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace sluice {

// A piece of the input: either raw text (token_id == -1) or one special token.
struct TextFragment {
  std::string_view text;
  int32_t token_id = -1;
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);

  // Splits `text` into raw-text fragments and special tokens, in order. Raw fragments are
  // never empty. With nothing special in `text`, the result is one raw fragment (or none
  // when `text` is empty).
  std::vector<TextFragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Candidate {
    std::string text;
    int32_t id;
    bool always;  // user-defined: matched even without parse_special
  };
  // Candidates by their first byte, longest first.
  std::vector<std::vector<Candidate>> by_first_byte_;
  bool has_always_ = false;
};

}  // namespace sluice
