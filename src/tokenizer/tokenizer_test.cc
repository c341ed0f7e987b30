#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

constexpr std::string_view kVocabularies[] = {"ggml-vocab-llama-spm", "ggml-vocab-gpt-2",
                                              "ggml-vocab-qwen2"};

#define SHARED_TOKENIZER_OR_SKIP(var, name)                                                  \
  const Tokenizer* var = testing::shared_tokenizer(name);                                    \
  if (var == nullptr) GTEST_SKIP() << "shared vocabulary " << name << " not found under " \
                                   << testing::shared_tokenizer_dir()

const std::vector<std::string> kAwkwardTexts = {
    "",
    "Hello, world!",
    "\xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",                  // 😀👍🏽 (skin tone)
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",  // ZWJ family
    "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7 flag",                               // 🇫🇷
    "\xE4\xB8\xAD\xE6\x96\x87\xE6\xB5\x8B\xE8\xAF\x95\xE3\x80\x82\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB",  // Hangul + jamo
    "e\xCC\x81 a\xCC\x8A\xCC\x81 Z\xCD\x91\xCD\x97\xCD\x9B\xCC\x9F",           // combining marks
    "   leading, trailing   ",
    "tabs\t\tand\nnewlines\n\n\r\n and   runs     of spaces",
    "\n",
    "\t",
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D",  // Arabic, Hebrew
    "\xE2\x80\x8B\xEF\xBB\xBF\xC2\xA0\xE3\x80\x80\xC2\x85x",  // ZWSP, BOM, NBSP, ideographic sp, NEL
    std::string("nul\0byte", 8),
    "\xF4\x8F\xBF\xBF \xEE\x80\x80",  // U+10FFFF, private use
    "<|im_start|> <s> </s> <|endoftext|>",  // special-token text, not parsed by default
    "x = 12345678; // 'quotes' \"double\" I'M YOU'LL",
};

TEST(Tokenizer, AwkwardTextRoundTripsOnEverySharedVocabulary) {
  for (std::string_view name : kVocabularies) {
    SHARED_TOKENIZER_OR_SKIP(tok, name);
    for (const std::string& text : kAwkwardTexts) {
      for (bool add_bos : {false, true}) {
        auto ids = tok->encode(text, {.add_bos = add_bos});
        ASSERT_TRUE(ids.has_value()) << name << ": " << ids.error().message();
        EXPECT_EQ(tok->decode(*ids), text) << name << " " << ::testing::PrintToString(text);
      }
    }
  }
}

TEST(Tokenizer, InvalidUtf8InputIsAnErrorNamingTheOffset) {
  SHARED_TOKENIZER_OR_SKIP(tok, "ggml-vocab-gpt-2");
  auto ids = tok->encode("abc\xFF" "def");
  ASSERT_FALSE(ids.has_value());
  EXPECT_NE(ids.error().message().find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(ids.error().message().find("offset 3"), std::string::npos);
  EXPECT_FALSE(tok->encode("truncated \xE2\x82").has_value());
  EXPECT_FALSE(tok->encode("surrogate \xED\xA0\x80").has_value());
}

TEST(Tokenizer, SpecialTokensAreParsedOnlyWhenAsked) {
  SHARED_TOKENIZER_OR_SKIP(tok, "ggml-vocab-qwen2");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  auto plain = tok->encode(text);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 151644), 0);
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 151645), 0);
  EXPECT_EQ(tok->decode(*plain), text);

  auto parsed = tok->encode(text, {.parse_special = true});
  ASSERT_TRUE(parsed.has_value());
  ASSERT_GE(parsed->size(), 3u);
  EXPECT_EQ(parsed->front(), 151644);
  EXPECT_EQ(parsed->back(), 151645);
  // Control tokens decode to nothing unless rendered.
  EXPECT_EQ(tok->decode(*parsed), "user\nhi");
  EXPECT_EQ(tok->decode(*parsed, /*render_special=*/true), text);
}

TEST(Tokenizer, UserDefinedTokensAreAlwaysParsed) {
  SHARED_TOKENIZER_OR_SKIP(tok, "ggml-vocab-qwen2");
  auto ids = tok->encode("a<tool_call>b");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 151657), 1);
  EXPECT_EQ(tok->decode(*ids), "a<tool_call>b");
}

TEST(Tokenizer, SpmAddsBosAndSpacePrefixAndDecodeDropsIt) {
  SHARED_TOKENIZER_OR_SKIP(tok, "ggml-vocab-llama-spm");
  // "Hello world" -> ▁Hello(15043) ▁world(3186), with BOS(1) by default.
  auto ids = tok->encode("Hello world");
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->decode(*ids), "Hello world");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{15043, 3186}), "Hello world");
  // Text after a parsed special token gets the space prefix again: <s> ▁Hello
  auto special = tok->encode("<s>Hello", {.add_bos = false, .parse_special = true});
  ASSERT_TRUE(special.has_value());
  EXPECT_EQ(*special, (std::vector<int32_t>{1, 15043}));
  // Not parsed, "<s>" is text and no id 1 appears.
  auto text = tok->encode("<s>Hello", {.add_bos = false});
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(std::count(text->begin(), text->end(), 1), 0);
}

TEST(Tokenizer, BosFollowsTheVocabularyFlag) {
  SHARED_TOKENIZER_OR_SKIP(qwen, "ggml-vocab-qwen2");
  EXPECT_FALSE(qwen->add_bos());
  EXPECT_EQ(*qwen->encode("Hello"), (std::vector<int32_t>{9707}));
  SHARED_TOKENIZER_OR_SKIP(llama, "ggml-vocab-llama-spm");
  EXPECT_TRUE(llama->add_bos());
  EXPECT_EQ(*llama->encode("Hello", {.add_bos = false}), (std::vector<int32_t>{15043}));
}

// Tekken (tiktoken's rule, as llama.cpp applies it) takes a piece the vocabulary holds whole
// as one token, where merges by rank would not reach it; and adds BOS by default.
TEST(Tokenizer, TekkenTakesWholePiecesAndAddsBos) {
  // "bc" merges first, so by rank "abc" is a + bc; the vocabulary holds "abc" whole.
  const std::vector<std::pair<std::string, std::string>> merges = {{"b", "c"}, {"a", "b"}, {"ab", "c"}};
  auto tekken = testing::tokenizer_from_writer(testing::tiny_bpe_writer(merges, "tekken"));
  auto gpt2 = testing::tokenizer_from_writer(testing::tiny_bpe_writer(merges, "gpt2"));
  ASSERT_TRUE(tekken && gpt2);
  EXPECT_EQ(*(*tekken)->encode("abc", {.add_bos = false}), (std::vector<int32_t>{258}));
  EXPECT_EQ(*(*gpt2)->encode("abc", {.add_bos = false}), (std::vector<int32_t>{'a', 256}));
  EXPECT_TRUE((*tekken)->add_bos());
  EXPECT_FALSE((*gpt2)->add_bos());
}

TEST(Tokenizer, ReportsKindPreAndSpecialIds) {
  SHARED_TOKENIZER_OR_SKIP(llama, "ggml-vocab-llama-spm");
  EXPECT_EQ(llama->kind(), "spm");
  EXPECT_EQ(llama->pre(), "default");
  EXPECT_EQ(llama->vocab_size(), 32000);
  EXPECT_EQ(llama->bos_id(), 1);
  EXPECT_EQ(llama->eos_id(), 2);
  EXPECT_EQ(llama->token_text(15043), "\xE2\x96\x81Hello");
  SHARED_TOKENIZER_OR_SKIP(qwen, "ggml-vocab-qwen2");
  EXPECT_EQ(qwen->kind(), "bpe");
  EXPECT_EQ(qwen->pre(), "qwen2");
  EXPECT_EQ(qwen->vocab_size(), 151936);
  EXPECT_EQ(qwen->eos_id(), 151645);
}

TEST(Tokenizer, EndOfGenerationCoversEosEotAndTurnEndTokens) {
  SHARED_TOKENIZER_OR_SKIP(qwen, "ggml-vocab-qwen2");
  EXPECT_TRUE(qwen->is_end_of_generation(151645));   // <|im_end|>, EOS
  EXPECT_TRUE(qwen->is_end_of_generation(151643));   // <|endoftext|>
  EXPECT_FALSE(qwen->is_end_of_generation(151644));  // <|im_start|>
  EXPECT_FALSE(qwen->is_end_of_generation(9707));    // Hello
  EXPECT_FALSE(qwen->is_end_of_generation(-1));
  EXPECT_FALSE(qwen->is_end_of_generation(1 << 30));
  SHARED_TOKENIZER_OR_SKIP(llama, "ggml-vocab-llama-spm");
  EXPECT_TRUE(llama->is_end_of_generation(2));
  EXPECT_FALSE(llama->is_end_of_generation(1));
}

TEST(Tokenizer, PiecesOfControlByteAndOutOfRangeTokens) {
  SHARED_TOKENIZER_OR_SKIP(llama, "ggml-vocab-llama-spm");
  EXPECT_EQ(llama->token_to_piece(1), "");
  EXPECT_EQ(llama->token_to_piece(1, /*render_special=*/true), "<s>");
  EXPECT_EQ(llama->token_to_piece(3 + 0x0A), "\n");     // <0x0A>
  EXPECT_EQ(llama->token_to_piece(3 + 0xE2), "\xE2");   // a lone byte, not yet UTF-8
  EXPECT_EQ(llama->token_to_piece(15043), " Hello");
  EXPECT_EQ(llama->token_to_piece(-1), "");
  EXPECT_EQ(llama->token_to_piece(32000), "");
  // decode() never returns broken UTF-8: a lone byte becomes U+FFFD.
  EXPECT_EQ(llama->decode(std::vector<int32_t>{15043, 3 + 0xE2}), "Hello\xEF\xBF\xBD");
}

TEST(Tokenizer, EncodesConcurrentlyFromManyThreads) {
  SHARED_TOKENIZER_OR_SKIP(tok, "ggml-vocab-qwen2");
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : kAwkwardTexts) expected.push_back(*tok->encode(text));
  std::vector<std::thread> threads;
  std::vector<int> num_mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < kAwkwardTexts.size(); ++i) {
          num_mismatches[t] += *tok->encode(kAwkwardTexts[i]) != expected[i];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(num_mismatches, std::vector<int>(4, 0));
}

// --- load errors name the key ------------------------------------------------------------

std::string load_error(const gguf::Writer& w) {
  auto tok = testing::tokenizer_from_writer(w);
  return tok.has_value() ? "(loaded)" : tok.error().message();
}

TEST(TokenizerLoad, MissingOrUnsupportedModelNamesTheKey) {
  gguf::Writer empty;
  empty.set_string("general.name", "x");
  EXPECT_NE(load_error(empty).find("tokenizer.ggml.model"), std::string::npos);
  gguf::Writer bert = testing::tiny_bpe_writer({});
  bert.set_string("tokenizer.ggml.model", "bert");
  const std::string message = load_error(bert);
  EXPECT_NE(message.find("tokenizer.ggml.model"), std::string::npos);
  EXPECT_NE(message.find("bert"), std::string::npos);
}

TEST(TokenizerLoad, UnknownPreTokenizerIsAnErrorNamingTheKey) {
  const std::string message = load_error(testing::tiny_bpe_writer({}, "mystery"));
  EXPECT_NE(message.find("tokenizer.ggml.pre"), std::string::npos) << message;
  EXPECT_NE(message.find("mystery"), std::string::npos) << message;
}

TEST(TokenizerLoad, BadArraysAndIdsNameTheKey) {
  gguf::Writer scores = testing::tiny_spm_writer({});
  scores.set_f32_array("tokenizer.ggml.scores", {1.0f, 2.0f});
  EXPECT_NE(load_error(scores).find("tokenizer.ggml.scores"), std::string::npos);

  gguf::Writer types = testing::tiny_spm_writer({});
  types.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(259, 9));
  EXPECT_NE(load_error(types).find("tokenizer.ggml.token_type"), std::string::npos);

  gguf::Writer bos = testing::tiny_spm_writer({});
  bos.set_u32("tokenizer.ggml.bos_token_id", 100000);
  EXPECT_NE(load_error(bos).find("tokenizer.ggml.bos_token_id"), std::string::npos);

  gguf::Writer tokens = testing::tiny_spm_writer({});
  tokens.set_string("tokenizer.ggml.tokens", "not an array");
  EXPECT_NE(load_error(tokens).find("tokenizer.ggml.tokens"), std::string::npos);

  gguf::Writer merges;
  merges.set_string("tokenizer.ggml.model", "gpt2");
  merges.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  EXPECT_NE(load_error(merges).find("tokenizer.ggml.merges"), std::string::npos);
}

}  // namespace
}  // namespace sluice
