// random: one available replica at random, with probability in proportion to its share (its
// weight, times its slow-start ramp while it comes back).
#include <random>

#include "common/mutex.h"
#include "router/policy.h"

namespace sluice::router {
namespace {

class RandomPolicy : public Policy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "random"; }
  Decision choose(const RouteRequest&, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (c.empty()) return {};
    double total = 0;
    for (int i : c) total += backends[i].share();
    double u;
    {
      MutexLock lock(mu_);
      u = std::uniform_real_distribution<double>(0, total)(rng_);
    }
    for (int i : c) {
      if (u < backends[i].share()) return {i, DecisionKind::kBalanced};
      u -= backends[i].share();
    }
    return {c.back(), DecisionKind::kBalanced};
  }

 private:
  Mutex mu_;
  std::mt19937_64 rng_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Policy> make_random(uint64_t seed) { return std::make_unique<RandomPolicy>(seed); }

}  // namespace sluice::router
