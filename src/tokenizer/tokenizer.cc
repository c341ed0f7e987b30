#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>

#include "common/check.h"
#include "common/utf8.h"
#include "tokenizer/byte_level.h"

namespace sluice {
namespace {

// Texts of control tokens that end a turn or a document in common chat formats.
constexpr std::array<std::string_view, 9> kEndOfGenerationTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<|return|>",
};

// "<0xNN>" -> NN, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

// The piece a token decodes to when special tokens are not rendered.
std::string plain_piece(const Vocab& vocab, int32_t id) {
  const std::string& text = vocab.tokens[id];
  switch (vocab.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return "";
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      const int byte = parse_byte_token(text);
      if (byte >= 0) return std::string(1, static_cast<char>(byte));
      break;
    }
    case TokenType::kUndefined:
    case TokenType::kNormal:
      break;
  }
  if (vocab.kind == VocabKind::kSpm) return replace_all(text, kSpmSpace, " ");
  return byte_level_to_bytes(text);
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), special_(vocab_) {}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  SLUICE_ASSIGN_OR_RETURN(Vocab vocab, load_vocab(file));
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(std::move(vocab)));
  SLUICE_RETURN_IF_ERROR(tokenizer->init(file));
  return tokenizer;
}

Status Tokenizer::init(const gguf::File& file) {
  if (vocab_.kind == VocabKind::kSpm) {
    spm_.emplace(vocab_);
  } else {
    auto pretokenizer = PreTokenizer::create(vocab_.pre);
    if (!pretokenizer) return pretokenizer.error().with_context("tokenizer.ggml.pre");
    pretokenizer_.emplace(std::move(*pretokenizer));
    auto merges = file.get_array("tokenizer.ggml.merges", gguf::ValueType::kString);
    if (!merges) return merges.error();
    // A piece the vocabulary holds whole is one token, merges or not (tiktoken's rule, which
    // llama.cpp applies to Llama 3 and Tekken).
    const bool ignore_merges = pretokenizer_->name() == "llama3" || pretokenizer_->name() == "tekken";
    auto bpe = BpeModel::create(vocab_, (*merges)->strings, ignore_merges);
    if (!bpe) return bpe.error();
    bpe_.emplace(std::move(*bpe));
  }

  pieces_.reserve(vocab_.tokens.size());
  end_of_generation_.assign(vocab_.tokens.size(), false);
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    pieces_.push_back(plain_piece(vocab_, id));
    max_bytes_per_token_ = std::max({max_bytes_per_token_, static_cast<int32_t>(pieces_.back().size()),
                                     static_cast<int32_t>(vocab_.tokens[id].size())});
    const TokenType type = vocab_.type(id);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      const std::string& text = vocab_.tokens[id];
      end_of_generation_[id] = std::find(kEndOfGenerationTexts.begin(), kEndOfGenerationTexts.end(),
                                         text) != kEndOfGenerationTexts.end();
    }
  }
  for (int32_t id : {vocab_.eos_id, vocab_.eot_id, vocab_.eom_id}) {
    if (id >= 0) end_of_generation_[id] = true;
  }
  return Status::ok();
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  const size_t valid = utf8_valid_prefix_length(text);
  if (valid != text.size()) {
    return Error("text is not valid UTF-8: bad byte 0x{:02X} at offset {}",
                 static_cast<uint8_t>(text[valid]), valid);
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (opts.add_bos && vocab_.add_bos) out.push_back(vocab_.bos_id);

  bool after_special = !opts.continues;  // the start of the text counts as "after a special token"
  for (const TextFragment& fragment : special_.split(text, opts.parse_special)) {
    if (fragment.token_id >= 0) {
      out.push_back(fragment.token_id);
      after_special = true;
      continue;
    }
    if (spm_) {
      if (vocab_.add_space_prefix && after_special) {
        spm_->encode(fmt::format(" {}", fragment.text), out);
      } else {
        spm_->encode(fragment.text, out);
      }
    } else {
      SLUICE_ASSIGN_OR_RETURN(const std::vector<std::string_view> words,
                              pretokenizer_->split(fragment.text));
      for (std::string_view word : words) bpe_->encode_word(word, out);
    }
    after_special = false;
  }

  if (opts.add_bos && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) return "";
  if (render_special) {
    const TokenType type = vocab_.type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused) {
      return vocab_.tokens[id];
    }
  }
  return pieces_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], render_special);
    const bool at_start = i == 0 || (i == 1 && ids[0] == vocab_.bos_id);
    if (at_start && strips_leading_space() && piece.starts_with(' ')) piece.erase(0, 1);
    bytes += piece;
  }
  return utf8_sanitize(bytes);
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < vocab_.size() && end_of_generation_[id];
}

const std::string& Tokenizer::token_text(int32_t id) const {
  SLUICE_CHECK(id >= 0 && id < vocab_.size()) << "token id " << id << " outside vocabulary of " << vocab_.size();
  return vocab_.tokens[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  SLUICE_CHECK(id >= 0 && id < vocab_.size()) << "token id " << id << " outside vocabulary of " << vocab_.size();
  return vocab_.type(id);
}

bool Tokenizer::strips_leading_space() const {
  return vocab_.kind == VocabKind::kSpm && vocab_.add_space_prefix;
}

}  // namespace sluice
