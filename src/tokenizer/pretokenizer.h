// PreTokenizer: splits text into the words that byte-level BPE then encodes one by one,
// with the regular expressions of a tokenizer.ggml.pre value.
//
// A pre-tokenizer is a sequence of regexes. Each regex splits every fragment produced by
// the previous one: its matches become fragments, and so do the unmatched gaps between them
// (nothing is dropped, so the fragments always concatenate back to the input).
//
//   gpt2 / gpt-2 / default   the GPT-2 regex
//   llama-bpe / llama3       the Llama 3 regex (case-insensitive contractions, digits in 1..3)
//   qwen2                    the Qwen2 regex (as Llama 3, but single digits)
//   smollm (and starcoder,   first \p{N} (each digit alone), then the GPT-2 regex
//   refact, command-r, ...)
//   deepseek-llm             newlines, Latin/Greek/Cyrillic... letter runs, punctuation, CJK, digit runs
//   deepseek-coder           newlines, letter runs, punctuation runs, CJK, single digits
//   deepseek-v3              digits in 1..3, CJK and kana, then a Llama-3-like regex with marks
//   falcon                   punctuation runs, GPT-2, then digits in threes
//   gpt-4o                   o200k: words split before capitals, digits in 1..3
//   tekken                   as gpt-4o without contractions, single digits
//   chameleon                sentinel/image tokens whole, spaces, single digits and punctuation, GPT-2
// (each from the model's published tokenizer.json; pretokenizer.cc cites them)
//
// An unknown name is an error (see create()): a silently wrong split would tokenize
// differently from the model's training, which is worse than refusing to load.
//
// Regexes run in PCRE2 with UTF and UCP (Unicode properties for \s, \p{L}, ...), JIT
// compiled when the platform supports it. Input must be valid UTF-8 (the caller checks).
//
// Thread-safety: immutable after create(); split() may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice {

class PreTokenizer {
 public:
  // Compiles the regexes for `pre`; errors for a name it does not know.
  static Result<PreTokenizer> create(std::string_view pre);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // The canonical name of the regex set ("gpt2", "llama3", "qwen2", "smollm").
  std::string_view name() const { return name_; }

  // Splits `text` into fragments that concatenate back to it; each is a view into `text`.
  // REQUIRES: `text` is valid UTF-8. An error only when PCRE2 itself fails (resource limits).
  Result<std::vector<std::string_view>> split(std::string_view text) const;

 private:
  struct Regex;
  PreTokenizer() = default;

  std::string name_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

// The names create() accepts, for messages and tests.
std::vector<std::string_view> supported_pretokenizer_names();

}  // namespace sluice
