// Vocab: the token table of a GGUF model (tokenizer.ggml.* keys), validated on load.
//
// Holds every token's text, score and type, the special token ids and the flags that
// shape encoding. Token ids are indices into `tokens`; every id stored here is either -1
// (absent) or a valid index. Merges (byte-level BPE) are not kept here: BpeModel turns them
// into id pairs at load time.
//
// Immutable after load; safe to share between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_reader.h"

namespace sluice {

// Values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class VocabKind {
  kSpm,  // tokenizer.ggml.model = "llama": SentencePiece with scores and byte fallback
  kBpe,  // tokenizer.ggml.model = "gpt2": byte-level BPE with merge ranks
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  VocabKind kind = VocabKind::kBpe;
  std::string pre = "default";          // tokenizer.ggml.pre
  std::vector<std::string> tokens;      // [num_tokens]
  std::vector<float> scores;            // [num_tokens], 0 when the file has none
  std::vector<TokenType> types;         // [num_tokens], kNormal when the file has none
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t eot_id = -1;
  int32_t eom_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;  // SPM only

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // The id of the token whose text is exactly `text`, or -1. When two tokens share a text,
  // the lower id wins.
  int32_t find(std::string_view text) const;
  TokenType type(int32_t id) const { return types[id]; }
};

// Reads and validates the tokenizer.ggml.* keys. Errors name the offending key.
Result<Vocab> load_vocab(const gguf::File& file);

}  // namespace sluice
