// random: one available replica uniformly at random.
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
    MutexLock lock(mu_);
    return {c[rng_() % c.size()], DecisionKind::kBalanced};
  }

 private:
  Mutex mu_;
  std::mt19937_64 rng_ SLUICE_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Policy> make_random(uint64_t seed) { return std::make_unique<RandomPolicy>(seed); }

}  // namespace sluice::router
