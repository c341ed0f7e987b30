#include "tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include "common/utf8.h"

namespace sluice {
namespace {

TEST(ByteLevel, PrintableBytesMapToThemselvesOthersAboveU0100) {
  // byte -> code point, as in GPT-2's bytes_to_unicode:
  //   'A' 0x41 -> U+0041   ' ' 0x20 -> U+0120 'Ġ'   '\n' 0x0A -> U+010A 'Ċ'   0xAD -> U+0143 'Ń'
  EXPECT_EQ(byte_to_unicode('A'), U'A');
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);
  EXPECT_EQ(byte_to_unicode(0x00), 0x100u);
  EXPECT_EQ(byte_to_unicode(0xAD), 0x143u);
  EXPECT_EQ(byte_to_unicode(0xFF), 0xFFu);
}

TEST(ByteLevel, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b))), b);
    all.push_back(static_cast<char>(b));
  }
  const std::string text = bytes_to_byte_level(all);
  EXPECT_TRUE(utf8_is_valid(text));
  EXPECT_EQ(byte_level_to_bytes(text), all);
}

TEST(ByteLevel, CodePointsOutsideTheAlphabetPassThrough) {
  EXPECT_EQ(unicode_to_byte(0x20), -1);   // a raw space is not in the alphabet
  EXPECT_EQ(unicode_to_byte(0x4E2D), -1);
  EXPECT_EQ(byte_level_to_bytes("\xC4\xA0" "a\xE4\xB8\xAD"), " a\xE4\xB8\xAD");  // "Ġa中"
}

}  // namespace
}  // namespace sluice
