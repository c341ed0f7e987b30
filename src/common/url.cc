#include "common/url.h"

#include <cctype>
#include <charconv>

namespace sluice::http {

std::string Url::target(std::string_view endpoint) const {
  std::string t = path;
  if (endpoint.empty() || endpoint.front() != '/') t += '/';
  t += endpoint;
  return t;
}

std::string Url::authority() const {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

std::string Url::to_string() const { return fmt::format("{}://{}{}", tls ? "https" : "http", authority(), path); }

Result<Url> parse_url(std::string_view text) {
  const std::string_view original = text;
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) {
    return Error(StatusCode::kInvalid, "URL '{}' has no scheme: write it as http://HOST:PORT", original);
  }
  std::string scheme(text.substr(0, scheme_end));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "http" && scheme != "https") {
    return Error(StatusCode::kInvalid, "URL '{}': scheme '{}' is not http or https", original, scheme);
  }
  text.remove_prefix(scheme_end + 3);
  if (text.find_first_of("?#") != std::string_view::npos) {
    return Error(StatusCode::kInvalid, "URL '{}': a base URL takes no query or fragment", original);
  }
  const size_t slash = text.find('/');
  std::string_view authority = text.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return Error(StatusCode::kInvalid, "URL '{}': user info is not supported (use --api-key)", original);
  }
  Url url;
  url.tls = scheme == "https";
  url.port = url.tls ? 443 : 80;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Error(StatusCode::kInvalid, "URL '{}': unclosed '['", original);
    url.host = authority.substr(1, close - 1);
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') {
      return Error(StatusCode::kInvalid, "URL '{}': unexpected text after ']'", original);
    }
    if (!rest.empty()) port_text = rest.substr(1);
  } else {
    const size_t colon = authority.rfind(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
    if (colon != std::string_view::npos && port_text.empty()) {
      return Error(StatusCode::kInvalid, "URL '{}': empty port after ':'", original);
    }
  }
  if (url.host.empty()) return Error(StatusCode::kInvalid, "URL '{}' has no host", original);
  // Host names are case-insensitive (RFC 3986 3.2.2): one spelling, so http://LOCALHOST:8000 and
  // http://localhost:8000 are one replica to the router.
  for (char& c : url.host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return Error(StatusCode::kInvalid, "URL '{}': port '{}' is not a number in 1..65535", original, port_text);
    }
    url.port = static_cast<uint16_t>(port);
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  url.path = path;
  return url;
}

}  // namespace sluice::http
