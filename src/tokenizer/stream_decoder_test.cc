#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Tiny SPM vocabulary: 1 <s>, 3 + b = <0xb>, 259 "h", 260 "▁hi".
constexpr int32_t kBos = 1;
constexpr int32_t kH = 259;
constexpr int32_t kSpaceHi = 260;
int32_t byte_id(uint8_t b) { return 3 + b; }

std::unique_ptr<Tokenizer> tiny_spm() {
  auto tok = testing::tokenizer_from_writer(testing::tiny_spm_writer({{"h", -1}, {"\xE2\x96\x81hi", -1}}));
  EXPECT_TRUE(tok.has_value()) << tok.error().message();
  return std::move(*tok);
}

TEST(StreamDecoder, HoldsBackATwoByteCharacterUntilComplete) {
  auto tok = tiny_spm();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.push(byte_id(0xC3)), "");  // first byte of "é"
  EXPECT_EQ(d.num_pending_bytes(), 1u);
  EXPECT_EQ(d.push(byte_id(0xA9)), "\xC3\xA9");
  EXPECT_EQ(d.num_pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, HoldsBackAnEmojiPushedOneByteAtATime) {
  auto tok = tiny_spm();
  StreamDecoder d(*tok);
  // 😀 = F0 9F 98 80
  EXPECT_EQ(d.push(kH), "h");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0x98)), "");
  EXPECT_EQ(d.push(byte_id(0x80)), "\xF0\x9F\x98\x80");
}

TEST(StreamDecoder, NeverValidBytesBecomeReplacementAtOnce) {
  auto tok = tiny_spm();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.push(byte_id(0xFF)), kReplacement);
  EXPECT_EQ(d.push(byte_id(0x80)), kReplacement);  // a stray continuation byte
  // A started sequence broken by an ASCII byte: U+FFFD, then the ASCII text.
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(kH), std::string(kReplacement) + "h");
}

// The U+FFFD of held-back bytes that a token shows to be invalid is the earlier token's: the
// pushed token's own text begins after it. A character it completes is not split.
TEST(StreamDecoder, CountsTheBytesEarlierTokensOwn) {
  auto tok = tiny_spm();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.push(kH), "h");
  EXPECT_EQ(d.num_carried_bytes(), 0u);
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(byte_id(0x82)), "");
  EXPECT_EQ(d.push(kH), std::string(kReplacement) + "h");
  EXPECT_EQ(d.num_carried_bytes(), kReplacement.size());
  EXPECT_EQ(d.push(kH), "h");
  EXPECT_EQ(d.num_carried_bytes(), 0u);
  // E2 then 28: the error is E2 alone, still the earlier token's.
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(byte_id(0x28)), std::string(kReplacement) + "(");
  EXPECT_EQ(d.num_carried_bytes(), kReplacement.size());
  // E2 completed by 82 AC: one character, "€", which the pushed token ends.
  EXPECT_EQ(d.push(byte_id(0xE2)), "");
  EXPECT_EQ(d.push(byte_id(0x82)), "");
  EXPECT_EQ(d.push(byte_id(0xAC)), "\xE2\x82\xAC");
  EXPECT_EQ(d.num_carried_bytes(), 0u);
  // A byte that is invalid on its own is the pushed token's own U+FFFD.
  EXPECT_EQ(d.push(byte_id(0xFF)), kReplacement);
  EXPECT_EQ(d.num_carried_bytes(), 0u);
}

TEST(StreamDecoder, FlushTurnsHeldBytesIntoOneReplacement) {
  auto tok = tiny_spm();
  StreamDecoder d(*tok);
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.flush(), kReplacement);
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, FirstTokenKeepsItsSpaceUnlessTheStreamStartsWithBos) {
  auto tok = tiny_spm();
  StreamDecoder continuation(*tok);
  EXPECT_EQ(continuation.push(kSpaceHi), " hi");  // continues a prompt: the space is real
  StreamDecoder from_bos(*tok);
  EXPECT_EQ(from_bos.push(kBos), "");
  EXPECT_EQ(from_bos.push(kSpaceHi), "hi");       // like decode(): encoding added that space
  EXPECT_EQ(from_bos.push(kSpaceHi), " hi");
  StreamDecoder at_start(*tok, /*at_sequence_start=*/true);
  EXPECT_EQ(at_start.push(kSpaceHi), "hi");
}

TEST(StreamDecoder, ByteLevelBpeEmojiSplitAcrossTokens) {
  const Tokenizer* tok = testing::shared_tokenizer("ggml-vocab-gpt-2");
  if (tok == nullptr) GTEST_SKIP() << "ggml-vocab-gpt-2 not found under " << testing::shared_tokenizer_dir();
  StreamDecoder d(*tok);
  std::string out;
  for (uint8_t b : {0xF0, 0x9F, 0x98, 0x80}) {
    const int32_t id = tok->vocab().find(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
    ASSERT_GE(id, 0);
    const std::string piece = d.push(id);
    if (b != 0x80) {
      EXPECT_EQ(piece, "");
    }
    out += piece;
  }
  EXPECT_EQ(out, "\xF0\x9F\x98\x80");
}

// For any id sequence (random ids produce arbitrary bytes), the pushed-and-flushed text is
// valid UTF-8 and equals decode() of the whole sequence.
TEST(StreamDecoder, StreamedTextEqualsDecodeForRandomIds) {
  std::vector<std::unique_ptr<Tokenizer>> owned;
  std::vector<const Tokenizer*> toks;
  owned.push_back(tiny_spm());
  toks.push_back(owned.back().get());
  for (std::string_view name : {"ggml-vocab-llama-spm", "ggml-vocab-qwen2"}) {
    if (const Tokenizer* t = testing::shared_tokenizer(name)) toks.push_back(t);
  }
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (const Tokenizer* tok : toks) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<int32_t> ids;
      if (trial % 2 == 0) ids.push_back(tok->bos_id());
      for (int i = 0; i < 40; ++i) {
        // Half byte-ish ids (low ids hold SPM byte tokens), half anywhere in the vocabulary.
        const uint64_t r = next();
        ids.push_back(static_cast<int32_t>(r % 2 ? (r >> 1) % 300 : (r >> 1) % tok->vocab_size()));
      }
      StreamDecoder d(*tok, /*at_sequence_start=*/true);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = d.push(id);
        EXPECT_TRUE(utf8_is_valid(piece));
        streamed += piece;
      }
      streamed += d.flush();
      EXPECT_EQ(streamed, tok->decode(ids)) << tok->kind() << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace sluice
