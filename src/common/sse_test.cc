#include "common/sse.h"

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

// Feeds `pieces` one after another and returns the data of each event.
std::vector<std::string> parse(SseParser& p, const std::vector<std::string>& pieces) {
  std::vector<std::string> data;
  for (const std::string& piece : pieces) p.feed(piece, [&](const SseEvent& e) { data.push_back(e.data); });
  return data;
}

std::vector<std::string> parse(const std::vector<std::string>& pieces) {
  SseParser p;
  return parse(p, pieces);
}

TEST(Sse, SplitsEventsOnBlankLines) {
  EXPECT_EQ(parse({"data: {\"a\":1}\n\ndata: [DONE]\n\n"}), (std::vector<std::string>{"{\"a\":1}", "[DONE]"}));
}

TEST(Sse, JoinsAnEventSplitAnywhereAcrossReads) {
  const std::string stream = "data: first\r\n\r\ndata: second\r\n\r\n";
  // Every way of cutting the stream in two gives the same events, including between \r and \n.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    EXPECT_EQ(parse(p, {stream.substr(0, cut), stream.substr(cut)}), (std::vector<std::string>{"first", "second"}))
        << "cut at " << cut;
    EXPECT_FALSE(p.has_partial_event());
  }
  // And byte by byte.
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  EXPECT_EQ(parse(bytes), (std::vector<std::string>{"first", "second"}));
}

TEST(Sse, AcceptsCrLfCrAndLfLineEnds) {
  EXPECT_EQ(parse({"data: a\r\rdata: b\n\ndata: c\r\n\r\n"}), (std::vector<std::string>{"a", "b", "c"}));
}

// Where an event ends in the raw bytes, for a relay that passes them on as they came: after a
// blank line in any line ends; a CR last waits for what follows unless the stream has ended.
TEST(Sse, FindsTheEndOfAnEventInTheRawBytes) {
  const std::string_view lf = "data: a\n\ndata: b", crlf = "data: a\r\n\r\ndata: b", cr = "data: a\r\r";
  EXPECT_EQ(sse_event_end(lf, 0), 9u);
  EXPECT_EQ(sse_event_end(lf, 9), std::string_view::npos);
  EXPECT_EQ(sse_event_end(crlf, 0), 11u);
  EXPECT_EQ(sse_event_end("data: a\r\n\r", 0), std::string_view::npos);  // "\r" may be half of "\r\n"
  EXPECT_EQ(sse_event_end(cr, 0), std::string_view::npos);
  EXPECT_EQ(sse_event_end(cr, 0, /*final=*/true), 9u);
  EXPECT_EQ(sse_event_end(": comment\n\n", 0), 11u);
}

TEST(Sse, JoinsMultiLineDataWithNewlines) {
  EXPECT_EQ(parse({"data: line one\ndata:line two\ndata\n\n"}), (std::vector<std::string>{"line one\nline two\n"}));
}

TEST(Sse, SkipsCommentsAndEventsWithoutData) {
  // ": ping" is a keep-alive comment; "event: x" alone has no data and is not dispatched.
  EXPECT_EQ(parse({": ping\n\nevent: x\n\ndata: y\n: inside\n\n"}), (std::vector<std::string>{"y"}));
}

TEST(Sse, KeepsEventNameAndId) {
  SseParser p;
  std::vector<SseEvent> events;
  p.feed("event: error\nid: 7\ndata: {}\n\n", [&](const SseEvent& e) { events.push_back(e); });
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "error");
  EXPECT_EQ(events[0].id, "7");
  EXPECT_EQ(events[0].data, "{}");
}

TEST(Sse, ReportsAnEventCutOffByTheEndOfTheStream) {
  SseParser p;
  EXPECT_EQ(parse(p, {"data: whole\n\ndata: cut"}), (std::vector<std::string>{"whole"}));
  EXPECT_TRUE(p.has_partial_event());
  SseParser q;
  parse(q, {"data: no blank line yet\n"});
  EXPECT_TRUE(q.has_partial_event());
}

}  // namespace
}  // namespace sluice::http
