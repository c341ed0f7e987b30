// power_of_two: two distinct available replicas at random, the less loaded of them (load as
// least_load's). Nearly least_load's balance without every router herding onto the same
// least-loaded replica between two scrapes (Mitzenmacher, "The power of two choices in
// randomized load balancing", 2001).
#include <random>

#include "common/mutex.h"
#include "router/policy.h"

namespace sluice::router {
namespace {

class PowerOfTwo : public Policy {
 public:
  explicit PowerOfTwo(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "power_of_two"; }
  Decision choose(const RouteRequest&, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (c.size() < 2) return {c.empty() ? -1 : c[0], DecisionKind::kBalanced};
    size_t a, b;
    {
      MutexLock lock(mu_);
      a = rng_() % c.size();
      b = rng_() % (c.size() - 1);
    }
    if (b >= a) ++b;
    const int x = c[a], y = c[b];
    return {backends[y].load() < backends[x].load() ? y : x, DecisionKind::kBalanced};
  }

 private:
  Mutex mu_;
  std::mt19937_64 rng_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Policy> make_power_of_two(uint64_t seed) { return std::make_unique<PowerOfTwo>(seed); }

}  // namespace sluice::router
