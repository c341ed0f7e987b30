#include "tokenizer/synthetic_vocab.h"

#include <gtest/gtest.h>

#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

std::unique_ptr<Tokenizer> synthetic(int32_t vocab_size, uint64_t seed) {
  gguf::Writer w;
  write_synthetic_bpe_vocab(w, vocab_size, seed);
  auto tok = testing::tokenizer_from_writer(w);
  EXPECT_TRUE(tok.has_value()) << tok.error().message();
  return tok.has_value() ? std::move(*tok) : nullptr;
}

const std::vector<std::string> kTexts = {
    "The keeper opens the gate.", "Hello, world! \xF0\x9F\x98\x80 \xE4\xB8\xAD\xE6\x96\x87",
    "  spaces\tand\nnewlines  ", "e\xCC\x81", std::string("\0\x01\x7F", 3), ""};

TEST(SyntheticVocab, LoadsBackAndRoundTripsTextAtEverySize) {
  for (int32_t size : {kSyntheticMinVocabSize, 300, 4096, 32000, 151936}) {
    auto tok = synthetic(size, 7);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->vocab_size(), size);
    EXPECT_EQ(tok->kind(), "bpe");
    for (const std::string& text : kTexts) {
      auto ids = tok->encode(text);
      ASSERT_TRUE(ids.has_value()) << ids.error().message();
      EXPECT_EQ(tok->decode(*ids), text) << "size " << size;
    }
  }
}

TEST(SyntheticVocab, SpecialTokensSitAtTheEndAsControlTokens) {
  // ids n-3 <|endoftext|> (BOS/EOS/pad), n-2 <|im_start|>, n-1 <|im_end|> (EOT)
  auto tok = synthetic(1000, 1);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->token_text(997), "<|endoftext|>");
  EXPECT_EQ(tok->token_text(998), "<|im_start|>");
  EXPECT_EQ(tok->token_text(999), "<|im_end|>");
  EXPECT_EQ(tok->bos_id(), 997);
  EXPECT_EQ(tok->eos_id(), 997);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_end_of_generation(997));
  EXPECT_TRUE(tok->is_end_of_generation(999));
  EXPECT_FALSE(tok->is_end_of_generation(998));
  auto ids = tok->encode("<|im_start|>user\nhi<|im_end|>", {.parse_special = true});
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(ids->front(), 998);
  EXPECT_EQ(ids->back(), 999);
}

TEST(SyntheticVocab, LearnedMergesMakeCommonWordsSingleTokens) {
  auto tok = synthetic(4096, 1);
  ASSERT_NE(tok, nullptr);
  auto ids = tok->encode("The water keeper");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(ids->size(), 3u);  // "The", " water", " keeper"
}

TEST(SyntheticVocab, SameSeedSameBytesOtherSeedOtherFill) {
  auto bytes = [](int32_t size, uint64_t seed) {
    gguf::Writer w;
    write_synthetic_bpe_vocab(w, size, seed);
    return w.to_bytes();
  };
  EXPECT_EQ(bytes(5000, 3), bytes(5000, 3));
  EXPECT_NE(bytes(5000, 3), bytes(5000, 4));
}

}  // namespace
}  // namespace sluice
