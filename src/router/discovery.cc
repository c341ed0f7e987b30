#include "router/discovery.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "router/backend.h"

namespace sluice::router {

Result<DiscoveryConfig> parse_discovery(std::string_view flag) {
  // Errors show the flag without its key (they reach logs).
  const std::string text = without_keys(flag);
  DiscoveryConfig d;
  const size_t comma = flag.find(',');
  std::string_view target = flag.substr(0, comma);
  if (!target.starts_with("dns:")) {
    return Error(StatusCode::kInvalid, "--discover '{}': only 'dns:NAME:PORT' is known", text);
  }
  target.remove_prefix(4);
  const size_t colon = target.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Error(StatusCode::kInvalid, "--discover '{}': expected dns:NAME:PORT", text);
  }
  d.host = std::string(target.substr(0, colon));
  const std::string_view port = target.substr(colon + 1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    return Error(StatusCode::kInvalid, "--discover '{}': port '{}' is not a number in 1..65535", text, port);
  }
  d.port = static_cast<uint16_t>(value);
  d.spec = fmt::format("dns:{}:{}", d.host, d.port);  // never the options: a key must not reach /metrics
  if (d.host.find_first_of("/[]@ ") != std::string::npos) {
    return Error(StatusCode::kInvalid, "--discover '{}': '{}' is not a DNS name", text, d.host);
  }
  // The options are a backend's: parsed as one, on a URL that stands for the name.
  if (comma != std::string_view::npos) {
    auto b = parse_backend(fmt::format("http://{}:{}{}", d.host, d.port, flag.substr(comma)));
    if (!b) return Error(StatusCode::kInvalid, "--discover '{}': {}", text, b.error().message());
    d.api_key = b->api_key;
    d.weight = b->weight;
  }
  return d;
}

std::string discovered_url(std::string_view address, bool ipv6, uint16_t port) {
  return ipv6 ? fmt::format("http://[{}]:{}", address, port) : fmt::format("http://{}:{}", address, port);
}

MembershipChange reconcile(const std::set<std::string>& known, std::span<const std::string> resolved) {
  MembershipChange c;
  const std::set<std::string> now(resolved.begin(), resolved.end());
  std::set_difference(now.begin(), now.end(), known.begin(), known.end(), std::back_inserter(c.add));
  std::set_difference(known.begin(), known.end(), now.begin(), now.end(), std::back_inserter(c.remove));
  return c;
}

}  // namespace sluice::router
