// round_robin: the available replicas in turn, skipping the excluded ones.
#include <atomic>

#include "router/policy.h"

namespace sluice::router {
namespace {

class RoundRobin : public Policy {
 public:
  std::string_view name() const override { return "round_robin"; }
  Decision choose(const RouteRequest&, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (c.empty()) return {};
    const uint64_t turn = next_.fetch_add(1, std::memory_order_relaxed);
    return {c[turn % c.size()], DecisionKind::kBalanced};
  }

 private:
  std::atomic<uint64_t> next_{0};
};

}  // namespace

std::unique_ptr<Policy> make_round_robin() { return std::make_unique<RoundRobin>(); }

}  // namespace sluice::router
