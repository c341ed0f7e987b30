// round_robin: the available replicas in turn, skipping the excluded ones, each as often as its
// share says (its weight, times its slow-start ramp while it comes back): smooth weighted round robin (as nginx's upstream module does it): every choice
// adds each candidate's weight to its running credit, takes the candidate with the most credit
// (ties: the lowest index) and takes the candidates' total weight off the winner's. With weights
// 2 and 1: a, b, a, a, b, a...; with equal weights, plain turns.
#include <vector>

#include "common/mutex.h"
#include "router/policy.h"

namespace sluice::router {
namespace {

class RoundRobin : public Policy {
 public:
  std::string_view name() const override { return "round_robin"; }
  Decision choose(const RouteRequest&, std::span<const BackendView> backends, std::span<const int> exclude) override {
    const std::vector<int> c = candidates(backends, exclude);
    if (c.empty()) return {};
    MutexLock lock(mu_);
    if (credit_.size() < backends.size()) credit_.resize(backends.size(), 0);
    double total = 0;
    int best = -1;
    for (int i : c) {
      credit_[i] += backends[i].share();
      total += backends[i].share();
      if (best < 0 || credit_[i] > credit_[best]) best = i;
    }
    credit_[best] -= total;
    return {best, DecisionKind::kBalanced};
  }
  void forget(int backend) override {
    MutexLock lock(mu_);
    if (static_cast<size_t>(backend) < credit_.size()) credit_[backend] = 0;
  }

 private:
  Mutex mu_;
  std::vector<double> credit_ SLUICE_GUARDED_BY(mu_);  // per slot
};

}  // namespace

std::unique_ptr<Policy> make_round_robin() { return std::make_unique<RoundRobin>(); }

}  // namespace sluice::router
