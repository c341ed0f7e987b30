#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using Fragments = std::vector<std::string_view>;

Fragments split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::create(pre);
  EXPECT_TRUE(p.has_value()) << p.error().message();
  auto fragments = p->split(text);
  EXPECT_TRUE(fragments.has_value()) << fragments.error().message();
  return *fragments;
}

TEST(PreTokenizer, Gpt2SplitsWordsContractionsAndSpaceRuns) {
  // "Hello world's  12 !!" -> Hello | ␣world | 's | ␣ | ␣12 | ␣!!
  EXPECT_EQ(split("gpt2", "Hello world's  12 !!"),
            (Fragments{"Hello", " world", "'s", " ", " 12", " !!"}));
  // \s+(?!\S) leaves the last white space before a word to stand alone; a trailing run
  // stays whole.
  EXPECT_EQ(split("gpt-2", "a\n\nb   "), (Fragments{"a", "\n", "\n", "b", "   "}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndKeepsNewlinesApart) {
  EXPECT_EQ(split("llama-bpe", "x=12345"), (Fragments{"x", "=", "123", "45"}));
  EXPECT_EQ(split("llama-bpe", "I'LL go\n\n  now"), (Fragments{"I", "'LL", " go", "\n\n", " ", " now"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "abc 2024!"), (Fragments{"abc", " ", "2", "0", "2", "4", "!"}));
}

TEST(PreTokenizer, SmollmSplitsDigitsFirstThenAppliesGpt2) {
  // \p{N} pass: "ab" | "1" | "2" | " cd"; then the GPT-2 regex inside each.
  EXPECT_EQ(split("smollm", "ab12 cd"), (Fragments{"ab", "1", "2", " cd"}));
}

TEST(PreTokenizer, NextLineCountsAsWhiteSpace) {
  // U+0085 is white space for the reference tokenizers, though not for PCRE2's \s: as
  // white space it splits like "\n\n" above; as punctuation it would be one fragment.
  EXPECT_EQ(split("gpt2", "a\xC2\x85\xC2\x85" "b"), (Fragments{"a", "\xC2\x85", "\xC2\x85", "b"}));
}

TEST(PreTokenizer, FragmentsAlwaysConcatenateToTheInput) {
  const std::vector<std::string_view> texts = {
      "", " ", "\t\n \r\n", "e\xCC\x81t\xC3\xA9", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80!",
      "\xE4\xB8\xAD\xE6\x96\x87 mixed 42 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
      "'''' 's 'S 'Re", "\xE2\x80\xA8\xE3\x80\x80x"};
  for (std::string_view pre : {"gpt2", "llama3", "qwen2", "smollm"}) {
    for (std::string_view text : texts) {
      std::string joined;
      for (std::string_view f : split(pre, text)) {
        EXPECT_FALSE(f.empty());
        joined += f;
      }
      EXPECT_EQ(joined, text) << pre;
    }
  }
}

TEST(PreTokenizer, LongWhiteSpaceRunDoesNotFail) {
  // Appended, not `std::string(...) + "x" + ...`: g++ 12 reports that as a memcpy out of
  // bounds (-Warray-bounds, a known false positive of its string inlining).
  std::string text(1 << 20, ' ');
  text += 'x';
  text.append(1 << 16, '\n');
  for (std::string_view pre : {"gpt2", "llama3", "qwen2"}) {
    size_t total = 0;
    for (std::string_view f : split(pre, text)) total += f.size();
    EXPECT_EQ(total, text.size()) << pre;
  }
}

TEST(PreTokenizer, UnknownNameIsAnErrorListingTheKnownOnes) {
  auto p = PreTokenizer::create("no-such-pre");
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message().find("no-such-pre"), std::string::npos);
  EXPECT_NE(p.error().message().find("qwen2"), std::string::npos);
}

}  // namespace
}  // namespace sluice
