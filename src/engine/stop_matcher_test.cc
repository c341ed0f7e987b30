#include "engine/stop_matcher.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sluice {
namespace {

// Everything a request would show, pushing `pieces` in order and flushing if not stopped.
struct Transcript {
  std::vector<std::string> emits;  // [pieces] emit of each push
  std::string text;                // all emitted text, flush included
  bool stopped = false;
  std::string matched;
};

Transcript run(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher matcher(std::move(stops));
  Transcript t;
  for (const std::string& piece : pieces) {
    StopMatcher::Step step = matcher.push(piece);
    t.emits.push_back(step.emit);
    t.text += step.emit;
    if (step.stopped) {
      t.stopped = true;
      t.matched = step.matched;
    }
  }
  t.text += matcher.flush();
  return t;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

TEST(StopMatcher, WithoutStopStringsEmitsEverythingAtOnce) {
  const Transcript t = run({"", ""}, {"Hello", " world"});
  EXPECT_EQ(t.emits, (std::vector<std::string>{"Hello", " world"}));
  EXPECT_FALSE(t.stopped);
}

TEST(StopMatcher, CatchesStopStringSplitAcrossPushes) {
  //   push       emit     held
  //   "Hi"       "Hi"     ""
  //   "\n"       ""       "\n"
  //   "\nUs"     ""       "\n\nUs"
  //   "er: x"    ""       stop: "\n\nUser:" complete; " x" is never emitted
  //   "more"     ""       (after the stop)
  const Transcript t = run({"\n\nUser:"}, {"Hi", "\n", "\nUs", "er: x", "more"});
  EXPECT_EQ(t.emits, (std::vector<std::string>{"Hi", "", "", "", ""}));
  EXPECT_EQ(t.text, "Hi");
  EXPECT_TRUE(t.stopped);
  EXPECT_EQ(t.matched, "\n\nUser:");
}

TEST(StopMatcher, EmitsTextBeforeStopInSamePush) {
  const Transcript t = run({"</s>"}, {"abc</s>def"});
  EXPECT_EQ(t.emits, (std::vector<std::string>{"abc"}));
  EXPECT_TRUE(t.stopped);
}

TEST(StopMatcher, StopAtVeryStartEmitsNothing) {
  const Transcript t = run({"User:"}, {"User:", "hello"});
  EXPECT_EQ(t.text, "");
  EXPECT_TRUE(t.stopped);
}

TEST(StopMatcher, ReleasesHeldPrefixWhenItDiverges) {
  //   "say Us" -> "say " (hold "Us"); "e" -> "" (hold "Use"); "x" -> "Usex"
  const Transcript t = run({"User:"}, {"say Us", "e", "x"});
  EXPECT_EQ(t.emits, (std::vector<std::string>{"say ", "", "Usex"}));
  EXPECT_FALSE(t.stopped);
}

TEST(StopMatcher, HoldsOnlyTheTailThatCanStillMatch) {
  // Stop "aac": "aa" may begin it and is held; after "b" no tail of "aab" ("ab", "b")
  // begins it, so everything is released.
  StopMatcher matcher({"aac"});
  EXPECT_EQ(matcher.push("aa").emit, "");
  EXPECT_EQ(matcher.num_held(), 2u);
  EXPECT_EQ(matcher.push("b").emit, "aab");
  EXPECT_EQ(matcher.num_held(), 0u);
  // Overlapping restart: "aaa" + "c" must match at index 1.
  StopMatcher restart({"aac"});
  EXPECT_EQ(restart.push("aaa").emit, "a");
  StopMatcher::Step step = restart.push("c");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.emit, "");
}

TEST(StopMatcher, EarliestOfSeveralStopStringsWins) {
  const Transcript t = run({"</s>", "\n\n"}, {"foo\n\nbar</s>"});
  EXPECT_EQ(t.text, "foo");
  EXPECT_EQ(t.matched, "\n\n");
}

TEST(StopMatcher, StopStringThatCompletesFirstWins) {
  // "bc" completes at byte 3, before "abcd" does at byte 4, as a stream would see it.
  Transcript t = run({"abcd", "bc"}, {"xabcd"});
  EXPECT_EQ(t.text, "xa");
  EXPECT_EQ(t.matched, "bc");
  // Both end at the same byte: the one that starts first emits less.
  t = run({"r:", "User:"}, {"Hi User: x"});
  EXPECT_EQ(t.text, "Hi ");
  EXPECT_EQ(t.matched, "User:");
}

TEST(StopMatcher, FlushReleasesHeldTextAtEnd) {
  StopMatcher matcher({"Hello!"});
  EXPECT_EQ(matcher.push("Oh, Hel").emit, "Oh, ");
  EXPECT_EQ(matcher.flush(), "Hel");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, NothingIsEmittedAfterStop) {
  StopMatcher matcher({"STOP", "ST"});
  StopMatcher::Step step = matcher.push("go ST");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.emit, "go ");
  EXPECT_EQ(step.matched, "ST");
  step = matcher.push("OP and more");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.emit, "");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcher, HeldTextNeverSplitsUtf8Characters) {
  // Stop "é!" = C3 A9 21. "è" = C3 A8 shares the lead byte with "é" but is not held;
  // "é" alone is held whole, then released whole when "x" diverges.
  const Transcript t = run({"\xC3\xA9!"}, {"caf\xC3\xA8", " caf\xC3\xA9", "x", "\xC3\xA9!"});
  EXPECT_EQ(t.emits, (std::vector<std::string>{"caf\xC3\xA8", " caf", "\xC3\xA9x", ""}));
  for (const std::string& e : t.emits) EXPECT_TRUE(valid_utf8(e)) << e;
  EXPECT_TRUE(t.stopped);
}

// Random texts of multi-byte characters, pushed whole and in random valid-UTF-8 pieces:
// every emit is valid UTF-8 and the outcome never depends on the split.
TEST(StopMatcher, OutcomeIsIndependentOfHowTextIsSplit) {
  const std::vector<std::string> alphabet = {"a", "b", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                             "\n"};
  const std::vector<std::string> stops = {"b\xE2\x82\xAC" "a", "\n\n\xC3\xA9", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80",
                                          "aaa"};
  uint64_t state = 12345;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  int num_stopped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string> chars;
    for (int i = 0; i < 40; ++i) chars.push_back(alphabet[next(alphabet.size())]);
    std::string whole;
    for (const std::string& c : chars) whole += c;
    const Transcript expected = run(stops, {whole});
    std::vector<std::string> pieces(1);
    for (const std::string& c : chars) {
      if (next(3) == 0) pieces.emplace_back();
      pieces.back() += c;
    }
    const Transcript t = run(stops, pieces);
    EXPECT_EQ(t.text, expected.text) << "trial " << trial;
    EXPECT_EQ(t.matched, expected.matched) << "trial " << trial;
    for (const std::string& e : t.emits) EXPECT_TRUE(valid_utf8(e)) << "trial " << trial;
    EXPECT_EQ(whole.starts_with(t.text), true);
    num_stopped += t.stopped;
  }
  EXPECT_GT(num_stopped, 30);   // both outcomes are exercised
  EXPECT_LT(num_stopped, 290);
}

}  // namespace
}  // namespace sluice
