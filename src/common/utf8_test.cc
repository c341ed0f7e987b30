#include "common/utf8.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Utf8, DecodesEachSequenceLength) {
  // "A" U+0041, "é" U+00E9, "€" U+20AC, "😀" U+1F600
  EXPECT_EQ(utf8_decode("A").code_point, U'A');
  Utf8Char e = utf8_decode("\xC3\xA9");
  EXPECT_EQ(e.code_point, 0xE9u);
  EXPECT_EQ(e.length, 2);
  EXPECT_EQ(e.status, Utf8Status::kValid);
  Utf8Char euro = utf8_decode("\xE2\x82\xAC rest");
  EXPECT_EQ(euro.code_point, 0x20ACu);
  EXPECT_EQ(euro.length, 3);
  Utf8Char emoji = utf8_decode("\xF0\x9F\x98\x80");
  EXPECT_EQ(emoji.code_point, 0x1F600u);
  EXPECT_EQ(emoji.length, 4);
}

TEST(Utf8, RejectsOverlongsSurrogatesAndOutOfRange) {
  for (std::string_view bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80",
                               "\xF0\x80\x80\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
                               "\xFF", "\x80"}) {
    const Utf8Char c = utf8_decode(bad);
    EXPECT_EQ(c.status, Utf8Status::kInvalid) << testing::PrintToString(bad);
    EXPECT_EQ(c.code_point, kReplacementChar);
    EXPECT_EQ(c.length, 1) << testing::PrintToString(bad);
  }
}

TEST(Utf8, InvalidLengthIsTheMaximalSubpart) {
  // E2 82 is a good start of a 3-byte sequence; 'A' breaks it after 2 bytes.
  const Utf8Char c = utf8_decode("\xE2\x82" "A");
  EXPECT_EQ(c.status, Utf8Status::kInvalid);
  EXPECT_EQ(c.length, 2);
}

TEST(Utf8, TruncatedSequenceIsIncomplete) {
  const Utf8Char c = utf8_decode("\xF0\x9F\x98");
  EXPECT_EQ(c.status, Utf8Status::kIncomplete);
  EXPECT_EQ(c.length, 3);
}

TEST(Utf8, EncodeRoundTripsEveryScalarValueSample) {
  for (char32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFDu, 0xFFFFu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    const std::string s = utf8_encode(cp);
    const Utf8Char c = utf8_decode(s);
    EXPECT_EQ(c.status, Utf8Status::kValid);
    EXPECT_EQ(c.code_point, cp);
    EXPECT_EQ(static_cast<size_t>(c.length), s.size());
  }
}

TEST(Utf8, EncodeReplacesSurrogatesAndOutOfRange) {
  EXPECT_EQ(utf8_encode(0xD800), kReplacementUtf8);
  EXPECT_EQ(utf8_encode(0x110000), kReplacementUtf8);
}

TEST(Utf8, ValidPrefixStopsAtFirstBadByte) {
  EXPECT_EQ(utf8_valid_prefix_length("ab\xC3\xA9" "c"), 5u);
  EXPECT_EQ(utf8_valid_prefix_length("ab\xC3"), 2u);
  EXPECT_EQ(utf8_valid_prefix_length("ab\xFF" "cd"), 2u);
  EXPECT_TRUE(utf8_is_valid(""));
  EXPECT_TRUE(utf8_is_valid("\xE4\xB8\xAD\xE6\x96\x87"));  // 中文
  EXPECT_FALSE(utf8_is_valid("\xED\xA0\x80"));
}

TEST(Utf8, IncompleteSuffixCountsOnlyBytesThatCouldStillBecomeValid) {
  // Table: input -> trailing bytes to hold back.
  EXPECT_EQ(utf8_incomplete_suffix_length(""), 0u);
  EXPECT_EQ(utf8_incomplete_suffix_length("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_suffix_length("a\xC3"), 1u);          // é cut after 1 of 2
  EXPECT_EQ(utf8_incomplete_suffix_length("a\xE2\x82"), 2u);      // € cut after 2 of 3
  EXPECT_EQ(utf8_incomplete_suffix_length("\xF0\x9F\x98"), 3u);   // 😀 cut after 3 of 4
  EXPECT_EQ(utf8_incomplete_suffix_length("\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_suffix_length("a\xFF"), 0u);          // never valid: not held
  EXPECT_EQ(utf8_incomplete_suffix_length("a\xE0\x80"), 0u);      // overlong start: not held
  EXPECT_EQ(utf8_incomplete_suffix_length("\xC3\xA9\xE2"), 1u);
}

TEST(Utf8, SanitizeReplacesEachMaximalSubpartOnce) {
  EXPECT_EQ(utf8_sanitize("plain"), "plain");
  EXPECT_EQ(utf8_sanitize("a\xFF\xFE" "b"), "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_sanitize("\xE2\x82" "A"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(utf8_sanitize("x\xF0\x9F\x98"), "x\xEF\xBF\xBD");  // incomplete tail -> one U+FFFD
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(utf8_is_valid(utf8_sanitize("\x80\xC0\xC1\xF5\xF8\xFC\xFE\xFF")));
}

TEST(Utf8, TerminalSafeEscapesControlsAndInvalidBytes) {
  EXPECT_EQ(terminal_safe("plain \xc3\xa9\t"), "plain \xc3\xa9\t");  // é and a tab stay
  EXPECT_EQ(terminal_safe("a\x1b[31mb\x07\x7f"), "a\\x1b[31mb\\x07\\x7f");
  EXPECT_EQ(terminal_safe("one\ntwo"), "one\\x0atwo");
  EXPECT_EQ(terminal_safe("one\ntwo", /*keep_lines=*/true), "one\ntwo");
  EXPECT_EQ(terminal_safe("csi \xc2\x9b and nbsp \xc2\xa0"), "csi \\u{9b} and nbsp \xc2\xa0");  // C1 only
  EXPECT_EQ(terminal_safe("bad \xff"), "bad \xef\xbf\xbd");
}

}  // namespace
}  // namespace sluice
