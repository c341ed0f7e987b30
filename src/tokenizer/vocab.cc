#include "tokenizer/vocab.h"

namespace sluice {
namespace {

using gguf::Value;
using gguf::ValueType;

constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";

Status load_scores(const gguf::File& file, Vocab& vocab) {
  vocab.scores.assign(vocab.tokens.size(), 0.0f);
  if (!file.find(kScoresKey)) return Status::ok();
  auto array = file.get_array(kScoresKey, ValueType::kF32);
  if (!array) return array.error();
  const Value& v = **array;
  if (v.count != vocab.tokens.size()) {
    return Status::error(fmt::format("{}: {} scores for {} tokens", kScoresKey, v.count,
                                     vocab.tokens.size()));
  }
  for (uint64_t i = 0; i < v.count; ++i) vocab.scores[i] = static_cast<float>(v.float_at(i));
  return Status::ok();
}

Status load_types(const gguf::File& file, Vocab& vocab) {
  vocab.types.assign(vocab.tokens.size(), TokenType::kNormal);
  if (!file.find(kTypesKey)) {
    // Without types, SentencePiece byte tokens are recognised by their "<0xNN>" form.
    if (vocab.kind == VocabKind::kSpm) {
      for (size_t i = 0; i < vocab.tokens.size(); ++i) {
        const std::string& t = vocab.tokens[i];
        if (t.size() == 6 && t.starts_with("<0x") && t.ends_with(">")) vocab.types[i] = TokenType::kByte;
      }
    }
    return Status::ok();
  }
  auto array = file.get_array(kTypesKey, ValueType::kI32);
  if (!array) return array.error();
  const Value& v = **array;
  if (v.count != vocab.tokens.size()) {
    return Status::error(fmt::format("{}: {} types for {} tokens", kTypesKey, v.count,
                                     vocab.tokens.size()));
  }
  for (uint64_t i = 0; i < v.count; ++i) {
    const int64_t t = v.int_at(i);
    if (t < 0 || t > static_cast<int64_t>(TokenType::kByte)) {
      return Status::error(fmt::format("{}: token {} has type {}, expected 0..6", kTypesKey, i, t));
    }
    vocab.types[i] = static_cast<TokenType>(t);
  }
  return Status::ok();
}

// Reads an optional token id key. -1 and 0xFFFFFFFF mean "none", as some converters write.
// REQUIRES: vocab.tokens is loaded.
Result<int32_t> load_token_id(const gguf::File& file, std::string_view key, const Vocab& vocab,
                              bool ignore_out_of_range) {
  SLUICE_ASSIGN_OR_RETURN(const int64_t id, file.get_int_or(key, -1));
  if (id == -1 || id == 0xFFFFFFFF) return -1;
  if (id < 0 || id >= vocab.size()) {
    if (ignore_out_of_range) return -1;
    return Error("{}: token id {} is outside the vocabulary (size {})", key, id, vocab.size());
  }
  return static_cast<int32_t>(id);
}

Status load_special_ids(const gguf::File& file, Vocab& vocab) {
  struct IdKey {
    std::string_view key;
    int32_t* id;
    bool ignore_out_of_range;
  };
  // NOTE: some converters write a padding id one past the vocabulary (a pad token added only
  // at training time); it is treated as absent rather than rejected.
  const IdKey keys[] = {
      {"tokenizer.ggml.bos_token_id", &vocab.bos_id, false},
      {"tokenizer.ggml.eos_token_id", &vocab.eos_id, false},
      {"tokenizer.ggml.unknown_token_id", &vocab.unk_id, false},
      {"tokenizer.ggml.padding_token_id", &vocab.pad_id, true},
      {"tokenizer.ggml.eot_token_id", &vocab.eot_id, false},
      {"tokenizer.ggml.eom_token_id", &vocab.eom_id, false},
  };
  for (const IdKey& k : keys) {
    auto id = load_token_id(file, k.key, vocab, k.ignore_out_of_range);
    if (!id) return id.error();
    *k.id = *id;
  }
  if (vocab.unk_id < 0) {
    for (int32_t i = 0; i < vocab.size(); ++i) {
      if (vocab.types[i] == TokenType::kUnknown) {
        vocab.unk_id = i;
        break;
      }
    }
  }
  return Status::ok();
}

Status load_flags(const gguf::File& file, Vocab& vocab) {
  // Defaults follow llama.cpp: SentencePiece vocabularies add BOS, byte-level BPE ones do
  // not, except Llama 3's and Tekken's.
  const bool is_llama3 = vocab.pre == "llama-bpe" || vocab.pre == "llama3" || vocab.pre == "llama-v3";
  const bool default_add_bos = vocab.kind == VocabKind::kSpm || is_llama3 || vocab.pre == "tekken";
  auto add_bos = file.get_bool_or("tokenizer.ggml.add_bos_token", default_add_bos);
  if (!add_bos) return add_bos.error();
  auto add_eos = file.get_bool_or("tokenizer.ggml.add_eos_token", false);
  if (!add_eos) return add_eos.error();
  auto add_space = file.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  if (!add_space) return add_space.error();
  vocab.add_bos = *add_bos && vocab.bos_id >= 0;
  vocab.add_eos = *add_eos && vocab.eos_id >= 0;
  vocab.add_space_prefix = *add_space;
  return Status::ok();
}

}  // namespace

int32_t Vocab::find(std::string_view text) const {
  auto it = token_to_id.find(text);
  return it == token_to_id.end() ? -1 : it->second;
}

Result<Vocab> load_vocab(const gguf::File& file) {
  Vocab vocab;
  SLUICE_ASSIGN_OR_RETURN(std::string_view model, file.get_string(kModelKey));
  if (model == "llama") {
    vocab.kind = VocabKind::kSpm;
  } else if (model == "gpt2") {
    vocab.kind = VocabKind::kBpe;
  } else {
    return Error("{}: unsupported tokenizer model '{}' (supported: llama, gpt2)", kModelKey, model);
  }
  if (file.find(kPreKey)) {
    SLUICE_ASSIGN_OR_RETURN(std::string_view pre, file.get_string(kPreKey));
    vocab.pre = std::string(pre);
  }

  SLUICE_ASSIGN_OR_RETURN(const Value* tokens, file.get_array(kTokensKey, ValueType::kString));
  if (tokens->count == 0) return Error("{}: the vocabulary is empty", kTokensKey);
  if (tokens->count > static_cast<uint64_t>(INT32_MAX)) {
    return Error("{}: {} tokens is more than token ids can address", kTokensKey, tokens->count);
  }
  vocab.tokens.reserve(tokens->count);
  vocab.token_to_id.reserve(tokens->count);
  for (std::string_view t : tokens->strings) {
    vocab.token_to_id.emplace(std::string(t), static_cast<int32_t>(vocab.tokens.size()));
    vocab.tokens.emplace_back(t);
  }

  SLUICE_RETURN_IF_ERROR(load_scores(file, vocab));
  SLUICE_RETURN_IF_ERROR(load_types(file, vocab));
  SLUICE_RETURN_IF_ERROR(load_special_ids(file, vocab));
  SLUICE_RETURN_IF_ERROR(load_flags(file, vocab));
  return vocab;
}

}  // namespace sluice
