#include "tokenizer/test_vocab.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "tokenizer/byte_level.h"

namespace sluice::testing {

std::string shared_tokenizer_dir() { return shared_dir() + "/tokenizer"; }

const Tokenizer* shared_tokenizer(std::string_view name) {
  // Test-only cache: the 151k-token Qwen2 vocabulary is loaded once, not once per test.
  static std::map<std::string, std::unique_ptr<Tokenizer>, std::less<>> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second.get();
  const std::string path = fmt::format("{}/{}.gguf", shared_tokenizer_dir(), name);
  if (!std::filesystem::exists(path)) return nullptr;
  auto file = gguf::File::open(path);
  if (!file) {
    ADD_FAILURE() << path << ": " << file.error().message();
    return nullptr;
  }
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) {
    ADD_FAILURE() << path << ": " << tok.error().message();
    return nullptr;
  }
  return cache.emplace(std::string(name), std::move(*tok)).first->second.get();
}

Result<std::unique_ptr<Tokenizer>> tokenizer_from_writer(const gguf::Writer& w) {
  SLUICE_ASSIGN_OR_RETURN(auto file, gguf::File::from_buffer(w.to_bytes(), "test.gguf"));
  return Tokenizer::from_gguf(*file);
}

gguf::Writer tiny_spm_writer(const std::vector<std::pair<std::string, float>>& pieces) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(1);
  }
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  return w;
}

gguf::Writer tiny_bpe_writer(const std::vector<std::pair<std::string, std::string>>& merges,
                             std::string_view pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  std::vector<std::string> merge_lines;
  for (const auto& [left, right] : merges) {
    merge_lines.push_back(bytes_to_byte_level(left) + " " + bytes_to_byte_level(right));
    tokens.push_back(bytes_to_byte_level(left + right));
    types.push_back(1);
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  tokens.push_back("<tool>");
  types.push_back(4);
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", std::string(pre));
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", merge_lines);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 2));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 2));
  return w;
}

}  // namespace sluice::testing
