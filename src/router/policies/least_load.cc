// least_load: the replica with the least load, where load is the requests the router has in
// flight there (its own count, exact and immediate) plus the waiting requests the replica
// reported on its last /metrics scrape (work from other routers or clients the router cannot
// see). Ties: the lowest index.
#include "router/policy.h"

namespace sluice::router {
namespace {

class LeastLoad : public Policy {
 public:
  std::string_view name() const override { return "least_load"; }
  Decision choose(const RouteRequest&, std::span<const BackendView> backends, std::span<const int> exclude) override {
    return {least_loaded(backends, candidates(backends, exclude)), DecisionKind::kBalanced};
  }
};

}  // namespace

std::unique_ptr<Policy> make_least_load() { return std::make_unique<LeastLoad>(); }

}  // namespace sluice::router
