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

TEST(Url, HttpsMeansTlsOnPort443UnlessNamed) {
  auto u = parse_url("HTTPS://api.example.com/v1/");
  ASSERT_TRUE(u) << u.error().message();
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->to_string(), "https://api.example.com:443/v1");
  auto v = parse_url("https://127.0.0.1:8443");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->port, 8443);
  EXPECT_FALSE(parse_url("http://h")->tls);
  EXPECT_EQ(parse_url("http://h")->port, 80);
}

// Host names are case-insensitive: one spelling (the router tells replicas apart by it).
TEST(Url, HostIsLowercase) {
  EXPECT_EQ(parse_url("http://LocalHost:8501/Prefix")->to_string(), "http://localhost:8501/Prefix");
  EXPECT_EQ(parse_url("http://[FE80::1]:9000")->host, "fe80::1");
}

TEST(Url, RejectsWhatItCannotServe) {
  // input                      -> a word the message must contain
  const std::pair<const char*, const char*> cases[] = {
      {"localhost:8000", "no scheme"},
      {"ftp://host", "not http or https"},
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
