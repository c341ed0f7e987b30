#include "bench/report.h"

#include <gtest/gtest.h>

#include "bench/svg.h"

namespace sluice::bench {
namespace {

RequestRecord ok_record(int64_t idx, double start, int32_t prompt, int32_t output, int32_t cached) {
  RequestRecord r;
  r.request_idx = idx;
  r.ok = true;
  r.start_s = start;
  r.ttft_s = 0.010;
  r.itl_s.assign(output - 1, 0.002);
  r.e2e_s = r.ttft_s + 0.002 * (output - 1);
  r.num_token_chunks = output;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.output_tokens_from_usage = true;
  r.cached_tokens = cached;
  r.finish_reason = "length";
  return r;
}

RequestRecord failed_record(int64_t idx, std::string kind) {
  RequestRecord r;
  r.request_idx = idx;
  r.start_s = 0.5;
  r.e2e_s = 0.001;
  r.error_kind = kind;
  r.error = "POST /v1/completions: " + kind + " <&>";
  return r;
}

// Three successes, three failures:
//   idx  prompt  output  cached
//   0    100     10      0
//   1    100     10      50
//   2    200     20      150
//   3    http_429, 4 http_429, 5 closed
BenchReport sample_report() {
  BenchReport report;
  report.config.model = "m<1>";
  report.config.num_requests = 6;
  report.api_url = "http://127.0.0.1:8000/v1";
  report.records = {ok_record(0, 0.0, 100, 10, 0),  ok_record(1, 0.1, 100, 10, 50), ok_record(2, 0.2, 200, 20, 150),
                    failed_record(3, "http_429"), failed_record(4, "http_429"),     failed_record(5, "closed")};
  report.summary = summarize(report.records, 2.0);
  return report;
}

TEST(Summarize, CountsTokensThroughputAndCachedFraction) {
  const Summary s = sample_report().summary;
  EXPECT_EQ(s.num_requests, 6);
  EXPECT_EQ(s.num_ok, 3);
  EXPECT_EQ(s.num_errors, 3);
  EXPECT_EQ(s.prompt_tokens, 400);
  EXPECT_EQ(s.output_tokens, 40);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.5);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 20);
  EXPECT_DOUBLE_EQ(s.total_tokens_per_s, 220);
  ASSERT_TRUE(s.cached_fraction);
  EXPECT_DOUBLE_EQ(*s.cached_fraction, 0.5);
  EXPECT_EQ(s.ttft_ms.count, 3);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, 10);
  EXPECT_EQ(s.itl_ms.count, 9 + 9 + 19);
  EXPECT_DOUBLE_EQ(s.itl_ms.p99, 2);
  EXPECT_NEAR(s.tpot_ms.mean, 2, 1e-9);
  EXPECT_DOUBLE_EQ(s.tokens_per_chunk, 1);
  ASSERT_EQ(s.errors.size(), 2u);
  EXPECT_EQ(s.errors[0].kind, "http_429");  // most frequent first
  EXPECT_EQ(s.errors[0].count, 2);
  EXPECT_EQ(s.errors[1].kind, "closed");
}

TEST(Summarize, CachedFractionIsUnknownWhenNoResponseReportedIt) {
  std::vector<RequestRecord> records = {ok_record(0, 0, 10, 2, -1)};
  const Summary s = summarize(records, 1);
  EXPECT_FALSE(s.cached_fraction);
  BenchReport report;
  report.records = records;
  report.summary = s;
  EXPECT_NE(format_report(report).find("cached tokens   unknown"), std::string::npos) << format_report(report);
}

TEST(FormatReport, ShowsTheTableAndErrors) {
  const std::string text = format_report(sample_report());
  for (const char* expected : {"6 sent", "3 ok", "3 failed", "20.0 output tokens/s", "50.0% of prompt tokens", "time to first token",
                               "inter-token latency", "errors (3)", "http_429", "closed"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << "\n" << text;
  }
}

TEST(ReportJson, ParsesBackWithEveryRequest) {
  const std::string text = report_json(sample_report()).dump(2);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["format"], "sluice-bench/1");
  EXPECT_EQ(j["config"]["model"], "m<1>");
  EXPECT_EQ(j["summary"]["num_ok"], 3);
  EXPECT_EQ(j["summary"]["cached_fraction"], 0.5);
  EXPECT_EQ(j["summary"]["ttft_ms"]["count"], 3);
  EXPECT_EQ(j["summary"]["errors"][0]["kind"], "http_429");
  ASSERT_EQ(j["requests"].size(), 6u);
  EXPECT_EQ(j["requests"][2]["cached_tokens"], 150);
  EXPECT_EQ(j["requests"][2]["itl_s"].size(), 19u);
  EXPECT_EQ(j["requests"][5]["error_kind"], "closed");
  EXPECT_TRUE(j["requests"][5]["ttft_s"].is_null());
}

// Checks that every element opened is closed in order; returns the element names in order.
std::vector<std::string> check_tags(const std::string& svg) {
  std::vector<std::string> stack, names;
  for (size_t i = svg.find('<'); i != std::string::npos; i = svg.find('<', i + 1)) {
    const size_t end = svg.find('>', i);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string tag = svg.substr(i + 1, end - i - 1);
    EXPECT_EQ(tag.find('<'), std::string::npos) << tag;
    if (tag[0] == '/') {
      EXPECT_FALSE(stack.empty());
      if (stack.empty()) break;
      EXPECT_EQ(stack.back(), tag.substr(1));
      stack.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    names.push_back(name);
    if (tag.back() != '/') stack.push_back(name);
  }
  EXPECT_TRUE(stack.empty());
  return names;
}

TEST(RenderSvg, IsWellFormedWithThePanelsAndPoints) {
  const std::string svg = render_svg(sample_report());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  const auto names = check_tags(svg);
  auto count = [&](const std::string& n) { return std::count(names.begin(), names.end(), n); };
  EXPECT_EQ(count("svg"), 1);
  EXPECT_EQ(count("circle"), 6);    // TTFT and E2E of three successes
  EXPECT_EQ(count("polyline"), 5);  // throughput, and four CDFs
  EXPECT_GE(count("text"), 10);
  EXPECT_NE(svg.find("m&lt;1&gt;"), std::string::npos);  // the model name is escaped
  EXPECT_NE(svg.find("latency CDFs"), std::string::npos);
}

TEST(RenderSvg, DrawsARunWithNoSuccessfulRequest) {
  BenchReport report;
  report.records = {failed_record(0, "connect")};
  report.summary = summarize(report.records, 0.01);
  const std::string svg = render_svg(report);
  check_tags(svg);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  // Empty panels say why rather than show bare axes.
  EXPECT_NE(svg.find("no tokens received"), std::string::npos);
  EXPECT_NE(svg.find("no request succeeded"), std::string::npos);
  EXPECT_EQ(render_svg(sample_report()).find("no request succeeded"), std::string::npos);
}

}  // namespace
}  // namespace sluice::bench
