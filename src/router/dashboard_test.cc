// The dashboard's page from the admin API's JSON: every section drawn, outside text escaped.
#include "router/dashboard.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/html.h"

namespace sluice::router {
namespace {

using Json = nlohmann::ordered_json;

TEST(Dashboard, DrawsReplicasTheRolloutAndShadowPairsWithOutsideTextEscaped) {
  DashboardData d;
  d.policy = "cache_aware";
  d.now = 1000;
  d.replicas = Json::parse(R"([{"url":"http://10.0.0.1:8000","version":"v1","state":"up","weight":1,"in_flight":2,
      "waiting":0,"kv_usage":0.25,"requests":40,"hit_rate":0.5,"predicted_hit_rate":0.4},
      {"url":"http://10.0.0.2:8000","version":"v2","state":"ejected","weight":1,"in_flight":0,"waiting":0,
      "kv_usage":0,"requests":3,"hit_rate":null,"predicted_hit_rate":null}])");
  d.rollout = Json::parse(R"({"name":"qwen-v2","stable":"v1","candidate":"v2","phase":"aborted","step":1,"weight":0,
      "failed_analyses":1,"spec":{"steps":[{"setWeight":10},{"analysis":{}}]},
      "decisions":[{"at":990,"step":0,"action":"start","reason":"v1 -> v2"},
                   {"at":995,"step":1,"action":"abort","reason":"shadow disagreement 100.0% <b>"}],
      "analyses":[{"at":995,"step":1,"passed":false,"reason":"shadow disagreement 100.0%"}]})");
  d.shadow = Json::parse(R"({"active":{"version":"v2","fraction":1,"by":"request","noiseFraction":0.5},"source":"rollout",
      "in_flight":1,"arms":{"candidate":{"pairs":8,"shadow_errors":0,"exact_match_rate":0,"disagreement_rate":1,
      "finish_reason_match_rate":1,"edit_distance":{"mean":0.8},"first_diff_token":{"p50":0},"logprob_gap":{"mean":null}},
      "noise":{"pairs":4,"exact_match_rate":1,"disagreement_rate":0}},"excess_disagreement":1,
      "timeline":[{"start":900,"candidate_agreement":0.5,"noise_agreement":1},{"start":960,"candidate_agreement":0,"noise_agreement":1}],
      "worst":[{"id":7,"at":998,"target":"/v1/completions","primary_replica":"http://10.0.0.1:8000",
      "shadow_replica":"http://10.0.0.2:8000","primary_version":"v1","shadow_version":"v2",
      "request":"{\"prompt\":\"<script>alert(1)</script>\"}","primary":{"text":"Once upon a time","finish_reason":"length"},
      "shadow":{"text":"zq zq zq","finish_reason":"length"},"comparison":{"edit_distance":0.9,"first_diff_token":0}}]})");
  const std::string html = render_dashboard(d);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  EXPECT_EQ(html.find("<script"), std::string::npos);  // none of ours, and the request's escaped
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("shadow disagreement 100.0% &lt;b&gt;"), std::string::npos);
  for (const char* want :
       {"http://10.0.0.1:8000", ">ejected<", "50.0%", "qwen-v2", ">aborted<", "5 s ago", "candidate weight 0%",
        "Once upon a time", "zq zq zq", "edit distance 0.90", "+100.0 points", "<polyline", "noise floor",
        "http-equiv=\"refresh\"", "policy cache_aware", "at step 1 of steps 0-1"}) {
    EXPECT_NE(html.find(want), std::string::npos) << want;
  }
  // Nothing from elsewhere: no external URL but the replicas' own, shown as text.
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
}

TEST(Dashboard, ShowsTheNewestFiftyDecisionsOfALongRollout) {
  DashboardData d;
  d.rollout = Json::parse(R"({"name":"long","phase":"progressing","decisions":[],"analyses":[]})");
  for (int i = 0; i < 120; ++i) {
    d.rollout["decisions"].push_back({{"at", i}, {"step", 0}, {"action", "note"}, {"reason", fmt::format("decision {}", i)}});
  }
  const std::string html = render_dashboard(d);
  EXPECT_NE(html.find("70 earlier not shown"), std::string::npos);
  EXPECT_EQ(html.find("decision 69<"), std::string::npos);
  EXPECT_NE(html.find("decision 70<"), std::string::npos);
  EXPECT_NE(html.find("decision 119<"), std::string::npos);
}

TEST(Dashboard, SaysWhatIsMissingRatherThanDrawingNothing) {
  DashboardData d;
  const std::string html = render_dashboard(d);
  EXPECT_NE(html.find("no replica"), std::string::npos);
  EXPECT_NE(html.find("No rollout has been started."), std::string::npos);
  EXPECT_NE(html.find("No shadow store."), std::string::npos);
  d.shadow = Json::parse(R"({"active":null,"arms":{},"timeline":[],"worst":[]})");
  const std::string empty = render_dashboard(d);
  EXPECT_NE(empty.find("no compared pairs yet"), std::string::npos);
  EXPECT_NE(empty.find("No differing pair."), std::string::npos);
  EXPECT_EQ(html_escape(R"(<a href="x">'&'</a>)"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

}  // namespace
}  // namespace sluice::router
