#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

// Tiny vocabulary: 0..255 byte tokens (byte b has id b), 256 + i = result of merge i.
std::unique_ptr<Tokenizer> tiny(const std::vector<std::pair<std::string, std::string>>& merges,
                                std::string_view pre = "gpt2") {
  auto tok = testing::tokenizer_from_writer(testing::tiny_bpe_writer(merges, pre));
  EXPECT_TRUE(tok.has_value()) << tok.error().message();
  return std::move(*tok);
}

std::vector<int32_t> encode(const Tokenizer& tok, std::string_view text) {
  auto ids = tok.encode(text, {.add_bos = false});
  EXPECT_TRUE(ids.has_value()) << ids.error().message();
  return *ids;
}

TEST(BpeModel, AppliesMergesInRankOrder) {
  // ranks: 0 "l l", 1 "h e", 2 "he ll", 3 "hell o"
  //   h e l l o -> h e ll o -> he ll o -> hell o -> hello (id 259)
  auto tok = tiny({{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}});
  EXPECT_EQ(encode(*tok, "hello"), (std::vector<int32_t>{259}));
  // "helo": only "h e" applies -> he l o
  EXPECT_EQ(encode(*tok, "helo"), (std::vector<int32_t>{257, 'l', 'o'}));
}

TEST(BpeModel, LowerRankWinsOverLeftmostPosition) {
  // ranks: 0 "b c", 1 "a b": "abc" -> a bc, never ab c
  auto tok = tiny({{"b", "c"}, {"a", "b"}});
  EXPECT_EQ(encode(*tok, "abc"), (std::vector<int32_t>{'a', 256}));
}

TEST(BpeModel, EqualRanksMergeLeftmostFirst) {
  // "aaa" with "a a": the left pair merges first -> aa a
  auto tok = tiny({{"a", "a"}});
  EXPECT_EQ(encode(*tok, "aaa"), (std::vector<int32_t>{256, 'a'}));
}

TEST(BpeModel, WordsAreEncodedSeparatelyAfterPreTokenization) {
  // " a" would merge, but "b a" splits into "b" and " a" first; "a" "b" never merge across words.
  auto tok = tiny({{" ", "a"}, {"b", " "}});
  EXPECT_EQ(encode(*tok, "b a"), (std::vector<int32_t>{'b', 256}));
}

TEST(BpeModel, MergeWithoutSpaceIsAnErrorNamingTheKey) {
  gguf::Writer w = testing::tiny_bpe_writer({});
  w.set_string_array("tokenizer.ggml.merges", {"ab"});
  auto tok = testing::tokenizer_from_writer(w);
  ASSERT_FALSE(tok.has_value());
  EXPECT_NE(tok.error().message().find("tokenizer.ggml.merges"), std::string::npos);
}

TEST(BpeModel, DecodesByteLevelTextBackToBytes) {
  auto tok = tiny({{" ", "\xC3"}});
  const std::vector<int32_t> ids = encode(*tok, " \xC3\xA9");
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 0xA9}));
  EXPECT_EQ(tok->token_to_piece(256), " \xC3");  // a partial character is fine in a piece
  EXPECT_EQ(tok->decode(ids), " \xC3\xA9");
}

}  // namespace
}  // namespace sluice
