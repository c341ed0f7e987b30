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

// Every name sluice lists is accepted, and an alias splits as the family it names does.
TEST(PreTokenizer, EveryListedNameLoadsAndAliasesSplitAsTheirFamily) {
  for (std::string_view name : supported_pretokenizer_names()) {
    EXPECT_TRUE(PreTokenizer::create(name)) << name;
  }
  const std::string text = "I'LL pay 12345 for 'it'";
  for (const char* alias : {"starcoder", "refact", "command-r", "codeshell", "exaone", "minerva", "minerva-7b"}) {
    EXPECT_EQ(split(alias, text), split("smollm", text)) << alias;
  }
  for (const char* alias : {"llama3", "llama-v3"}) EXPECT_EQ(split(alias, text), split("llama-bpe", text)) << alias;
  EXPECT_EQ(split("deepseek-r1-qwen", text), split("qwen2", text));
  EXPECT_FALSE(PreTokenizer::create("minerva-8b"));
}

// The other families' rules, on text that tells them apart (digits, capitals, contractions,
// punctuation, CJK, special-token shapes).
TEST(PreTokenizer, DeepseekFamiliesSplitDigitsLettersAndCjkTheirOwnWay) {
  // LLM: digit runs whole; Latin and Greek letter runs (its own letter class); CJK apart.
  EXPECT_EQ(split("deepseek-llm", "Hello World 12345"), (Fragments{"Hello", " World", " ", "12345"}));
  EXPECT_EQ(split("deepseek-llm", "\xE4\xB8\xAD\xE6\x96\x87" "abc \xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1"),
            (Fragments{"\xE4\xB8\xAD\xE6\x96\x87", "abc", " \xCE\xA9\xCE\xBC\xCE\xAD\xCE\xB3\xCE\xB1"}));
  EXPECT_EQ(split("deepseek-llm", "x,.y\nz"), (Fragments{"x", ",.", "y", "\n", "z"}));
  // Coder: single digits, punctuation runs with an optional space.
  EXPECT_EQ(split("deepseek-coder", "Hello World 12345"),
            (Fragments{"Hello", " World", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("deepseek-coder", "a ,.b"), (Fragments{"a", " ,.", "b"}));
  // V3: digits in threes, kana with the ideographs, punctuation glued to a following ASCII word.
  EXPECT_EQ(split("deepseek-v3", "Hello World 12345"), (Fragments{"Hello", " World", " ", "123", "45"}));
  EXPECT_EQ(split("deepseek-v3", "\xE3\x81\x8B\xE4\xB8\xADx.foo"),
            (Fragments{"\xE3\x81\x8B\xE4\xB8\xAD", "x", ".foo"}));
}

TEST(PreTokenizer, Gpt4oAndTekkenSplitBeforeCapitals) {
  EXPECT_EQ(split("gpt-4o", "HelloWorld can't 12345"),
            (Fragments{"Hello", "World", " can't", " ", "123", "45"}));
  EXPECT_EQ(split("tekken", "HelloWorld can't 12345"),
            (Fragments{"Hello", "World", " can", "'t", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("gpt2", "HelloWorld can't 12345"), (Fragments{"HelloWorld", " can", "'t", " 12345"}));
}

TEST(PreTokenizer, FalconAndChameleonRules) {
  // Falcon: punctuation runs first, GPT-2 words, then digits in threes.
  EXPECT_EQ(split("falcon", "a+=12345 b"), (Fragments{"a", "+=", "123", "45", " b"}));
  // Chameleon: two spaces alone, single digits and punctuation. Its sentinel rule isolates
  // "<sentinel:12>" first, but every later rule splits every fragment again (as Hugging Face's
  // Sequence does): such tokens stay whole as special tokens, matched before pre-tokenizing.
  EXPECT_EQ(split("chameleon", "<sentinel:12>ab  c1,2"),
            (Fragments{"<", "sentinel", ":", "1", "2", ">", "ab", "  ", "c", "1", ",", "2"}));
  EXPECT_EQ(split("mpt", "Hello world's"), (Fragments{"Hello", " world", "'s"}));
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
  for (std::string_view pre : supported_pretokenizer_names()) {
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
