// DNS discovery of replicas (`sluice route --discover dns:NAME:PORT`): NAME is resolved every
// interval, and each address it lists is a replica at http://ADDRESS:PORT. A Kubernetes headless
// service lists its ready pods this way (deploy/kubernetes/), so the router follows a
// Deployment as it scales, rolls or loses pods, with no API access of its own.
//
// Each round compares the addresses with the replicas this discovery added before: new ones are
// added (ramping up over the slow start, except in the first round), gone ones removed (their
// requests in flight finish; backend.h). A lookup that fails or times out changes nothing: a DNS
// hiccup must not empty the pool. A replica that is also given with --backend stays static: the
// discovery neither adds it twice nor removes it.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::router {

struct DiscoveryConfig {
  std::string host;     // the DNS name
  uint16_t port = 0;    // of every replica it lists
  std::string api_key;  // sent to each of them, as a backend's ",key="
  double weight = 1;
  std::string spec;     // "dns:NAME:PORT", for messages and metrics (without the options)
};

// Parses "dns:NAME:PORT[,key=KEY][,weight=W]".
Result<DiscoveryConfig> parse_discovery(std::string_view text);

// The replica URL of a resolved address: http://10.0.0.5:8000, http://[fd00::5]:8000.
std::string discovered_url(std::string_view address, bool ipv6, uint16_t port);

// One round: which of `resolved` to add and which of `known` (the names this discovery added and
// still holds) to remove, each sorted.
struct MembershipChange {
  std::vector<std::string> add, remove;
};
MembershipChange reconcile(const std::set<std::string>& known, std::span<const std::string> resolved);

}  // namespace sluice::router
