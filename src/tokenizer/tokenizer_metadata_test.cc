#include "tokenizer/tokenizer_metadata.h"

#include <gtest/gtest.h>

#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

TEST(TokenizerMetadata, CopiesEveryTokenizerKeyAndNothingElse) {
  gguf::Writer source;
  source.set_string("general.name", "source");
  source.set_string("tokenizer.chat_template", "{{ messages }}");
  write_synthetic_bpe_vocab(source, 2000, 5);
  auto src = gguf::File::from_buffer(source.to_bytes(), "src.gguf");
  ASSERT_TRUE(src.has_value()) << src.error().message();

  gguf::Writer dest;
  dest.set_string("general.name", "dest");
  copy_tokenizer_metadata(**src, dest);
  auto dst = gguf::File::from_buffer(dest.to_bytes(), "dst.gguf");
  ASSERT_TRUE(dst.has_value()) << dst.error().message();

  EXPECT_EQ((*dst)->get_string_or("general.name", ""), "dest");
  EXPECT_EQ((*dst)->get_string_or("tokenizer.chat_template", ""), "{{ messages }}");
  size_t num_tokenizer_keys = 0;
  for (const auto& [key, value] : (*src)->metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    ++num_tokenizer_keys;
    const gguf::Value* copied = (*dst)->find(key);
    ASSERT_NE(copied, nullptr) << key;
    EXPECT_EQ(copied->type, value.type) << key;
    EXPECT_EQ(copied->to_string(), value.to_string()) << key;
  }
  EXPECT_GE(num_tokenizer_keys, 8u);

  auto a = Tokenizer::from_gguf(**src);
  auto b = Tokenizer::from_gguf(**dst);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(*(*a)->encode("copied tokenizers agree"), *(*b)->encode("copied tokenizers agree"));
}

}  // namespace
}  // namespace sluice
