// Tokenizer: text <-> token ids for a GGUF model, SentencePiece ("llama") or byte-level BPE
// ("gpt2"), built from the file's tokenizer.ggml.* metadata.
//
// Encoding: special tokens written in the text are recognised first (special_tokens.h: control
// tokens only with EncodeOptions::parse_special, user-defined tokens always); each stretch of
// plain text between them is then encoded by SpmModel (with the leading-space rule below) or
// pre-tokenized (pretokenizer.h) and encoded word by word by BpeModel.
//
// Decisions a caller should know:
//   - Input text to encode() must be valid UTF-8; otherwise encode() returns an error naming
//     the byte offset of the first bad byte. (Nothing is replaced silently: the caller decides
//     whether to reject the request or to run utf8_sanitize() first.)
//   - EncodeOptions::add_bos adds the framing the vocabulary asks for: BOS when
//     tokenizer.ggml.add_bos_token is true (default: SPM yes, BPE no, Llama 3 yes), and EOS at
//     the end when tokenizer.ggml.add_eos_token is true. add_bos = false adds neither.
//   - SPM: a space is put in front of the text (unless add_space_prefix = false) and in front
//     of text that follows a special token; decode() drops the space this put at the start.
//   - token_to_piece(): control, unknown and unused tokens decode to "" unless render_special
//     is set, in which case they decode to their vocabulary text. Byte tokens decode to their
//     byte, which may be a partial UTF-8 character; StreamDecoder/decode() handle that.
//   - An unsupported tokenizer.ggml.model or tokenizer.ggml.pre is an error at load time.
//   - No Unicode normalization (NFC/NFKC) is applied, so encode -> decode is the identity
//     on valid UTF-8 (up to the vocabulary's own coverage).
//
// Immutable after from_gguf(); every method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer_metadata.h"
#include "tokenizer/vocab.h"

namespace sluice {

struct EncodeOptions {
  bool add_bos = true;         // add BOS/EOS where the vocabulary asks for them (see above)
  bool parse_special = false;  // recognise control tokens such as "<|im_start|>" in the text
  bool continues = false;      // the text goes on from other tokens: no SPM space put in front
};

class Tokenizer {
 public:
  // Errors name the metadata key that is missing or wrong.
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& opts = {}) const;

  // The raw bytes token `id` stands for (may be part of a UTF-8 character). An id outside
  // the vocabulary decodes to "".
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  // The whole sequence as valid UTF-8: invalid bytes become U+FFFD; control tokens are
  // skipped; with SPM, the leading space of the first text token (at the start, or right
  // after BOS) is dropped.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t eot_id() const { return vocab_.eot_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  // True for EOS, EOT, EOM and tokens whose text marks an end of turn or of text
  // ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>", ...).
  bool is_end_of_generation(int32_t id) const;
  std::string_view kind() const { return vocab_.kind == VocabKind::kSpm ? "spm" : "bpe"; }
  // tokenizer.ggml.pre as written in the file ("default" when absent).
  std::string_view pre() const { return vocab_.pre; }
  // REQUIRES: 0 <= id < vocab_size().
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // SPM: true when decoding drops one leading space from the first text token.
  bool strips_leading_space() const;
  const Vocab& vocab() const { return vocab_; }
  // No token stands for more bytes of input text than this (the longest token text, special
  // tokens included, and at least 4: an unknown character), so a text of B bytes encodes to
  // at least B / max_bytes_per_token() tokens. Lets a server refuse a prompt that cannot fit
  // the context without tokenizing all of it.
  int32_t max_bytes_per_token() const { return max_bytes_per_token_; }

 private:
  explicit Tokenizer(Vocab vocab);
  Status init(const gguf::File& file);
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;

  Vocab vocab_;
  std::vector<std::string> pieces_;  // [num_tokens] token_to_piece(id, false)
  int32_t max_bytes_per_token_ = 4;
  std::vector<bool> end_of_generation_;
  SpecialTokenSplitter special_;
  std::optional<SpmModel> spm_;
  std::optional<BpeModel> bpe_;
  std::optional<PreTokenizer> pretokenizer_;
};

}  // namespace sluice
