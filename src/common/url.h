// Url: the parts of an http:// base URL a client needs to reach an endpoint.
//
// Base URLs name a server and, optionally, a path prefix that every endpoint path is put under:
// "http://127.0.0.1:8000" (prefix ""), "http://localhost:8000/v1" (prefix "/v1"). Only plain
// http is supported; https is refused with a message that says so, rather than connecting and
// failing later on a TLS handshake.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace sluice::http {

struct Url {
  std::string host;  // a name or an IP address; an IPv6 address without its brackets
  uint16_t port = 80;
  std::string path;  // the prefix: "" or "/a/b" (never ends with '/')

  // The request target of `endpoint` ("/completions") under this URL's prefix.
  std::string target(std::string_view endpoint) const;
  // "host:port" as the Host header wants it (IPv6 in brackets).
  std::string authority() const;
  // "http://host:port/path".
  std::string to_string() const;
};

// Parses "http://HOST[:PORT][/PATH]". Rejects https, other schemes, user info, queries and
// fragments with a message naming the problem.
Result<Url> parse_url(std::string_view text);

}  // namespace sluice::http
