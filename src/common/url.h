// Url: the parts of an http:// or https:// base URL a client needs to reach an endpoint.
//
// Base URLs name a server and, optionally, a path prefix that every endpoint path is put under:
// "http://127.0.0.1:8000" (prefix ""), "https://api.example.com/v1" (prefix "/v1", TLS, port
// 443). HttpConnection speaks TLS to https URLs (http_client.h); a component that cannot (the
// router's proxy) refuses them itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::http {

struct Url {
  std::string host;  // a name or an IP address; an IPv6 address without its brackets
  uint16_t port = 80;  // 443 for https unless the URL names one
  std::string path;  // the prefix: "" or "/a/b" (never ends with '/')
  bool tls = false;  // https

  // The request target of `endpoint` ("/completions") under this URL's prefix.
  std::string target(std::string_view endpoint) const;
  // "host:port" as the Host header wants it (IPv6 in brackets).
  std::string authority() const;
  // "http://host:port/path" (https for tls).
  std::string to_string() const;
};

// Parses "http[s]://HOST[:PORT][/PATH]". Rejects other schemes, user info, queries and fragments
// with a message naming the problem.
Result<Url> parse_url(std::string_view text);

}  // namespace sluice::http
