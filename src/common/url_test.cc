#include "common/url.h"

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

TEST(Url, ParsesHostPortAndPrefix) {
  auto u = parse_url("http://localhost:8000/v1/");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->path, "/v1");
  EXPECT_EQ(u->target("/completions"), "/v1/completions");
  EXPECT_EQ(u->to_string(), "http://localhost:8000/v1");
}

TEST(Url, DefaultsToPort80AndNoPrefix) {
  auto u = parse_url("HTTP://127.0.0.1");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->path, "");
  EXPECT_EQ(u->target("v1/models"), "/v1/models");
}

TEST(Url, KeepsIpv6InBrackets) {
  auto u = parse_url("http://[::1]:9000");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->authority(), "[::1]:9000");
}

TEST(Url, RejectsWhatItCannotServe) {
  // input                      -> a word the message must contain
  const std::pair<const char*, const char*> cases[] = {
      {"https://api.example.com", "https is not supported"},
      {"localhost:8000", "no scheme"},
      {"ftp://host", "not http"},
      {"http://:8000", "no host"},
      {"http://host:", "empty port"},
      {"http://host:99999", "1..65535"},
      {"http://host:80x", "1..65535"},
      {"http://user@host", "user info"},
      {"http://host/v1?x=1", "query"},
      {"http://[::1", "unclosed"},
  };
  for (const auto& [input, word] : cases) {
    auto u = parse_url(input);
    ASSERT_FALSE(u) << input;
    EXPECT_NE(u.error().message().find(word), std::string::npos) << input << ": " << u.error().message();
    EXPECT_EQ(u.error().code(), StatusCode::kInvalid);
  }
}

}  // namespace
}  // namespace sluice::http
