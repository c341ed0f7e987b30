#include "tokenizer/spm.h"

#include <gtest/gtest.h>

#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

// Tiny vocabulary: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then:
//   259 ▁ (-10)  260 h (-10)  261 e (-10)  262 l (-10)  263 o (-10)
//   264 ll (-1)  265 he (-2)  266 ▁he (-3)  267 llo (-4)
constexpr int32_t kFirstPiece = 259;
std::unique_ptr<Tokenizer> tiny() {
  auto tok = testing::tokenizer_from_writer(testing::tiny_spm_writer({
      {"\xE2\x96\x81", -10}, {"h", -10}, {"e", -10}, {"l", -10}, {"o", -10},
      {"ll", -1}, {"he", -2}, {"\xE2\x96\x81he", -3}, {"llo", -4}}));
  EXPECT_TRUE(tok.has_value()) << tok.error().message();
  return std::move(*tok);
}

TEST(SpmModel, MergesTheHighestScoringPairFirst) {
  // "▁hello": ll(-1) then he(-2) then ▁he(-3) then llo(-4)  ->  [▁he, llo]
  auto ids = tiny()->encode("hello", {.add_bos = false});
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{kFirstPiece + 7, kFirstPiece + 8}));
}

TEST(SpmModel, BreaksScoreTiesLeftmostFirst) {
  // "▁lll": the pairs (l,l) at 1 and at 2 score alike; the left one merges -> [▁, ll, l]
  auto ids = tiny()->encode("lll", {.add_bos = false});
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{kFirstPiece, kFirstPiece + 5, kFirstPiece + 3}));
}

TEST(SpmModel, FallsBackToByteTokensForUnknownCharacters) {
  // "é" is not a piece: its two UTF-8 bytes become <0xC3> <0xA9> (ids 3 + byte).
  auto tok = tiny();
  auto ids = tok->encode("h\xC3\xA9", {.add_bos = true});
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, kFirstPiece, kFirstPiece + 1, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(*ids), "h\xC3\xA9");
}

TEST(SpmModel, SpacesBecomeLowerOneEighthBlock) {
  EXPECT_EQ(spm_escape_spaces(" a  b"), "\xE2\x96\x81" "a\xE2\x96\x81\xE2\x96\x81" "b");
}

TEST(SpmModel, NoSpacePrefixWhenTheVocabularySaysSo) {
  gguf::Writer w = testing::tiny_spm_writer({{"h", -1}, {"\xE2\x96\x81", -1}});
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  auto tok = testing::tokenizer_from_writer(w);
  ASSERT_TRUE(tok.has_value());
  auto ids = (*tok)->encode("h", {.add_bos = false});
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{kFirstPiece}));
  EXPECT_EQ((*tok)->decode(std::vector<int32_t>{kFirstPiece + 1, kFirstPiece}), " h");
}

}  // namespace
}  // namespace sluice
