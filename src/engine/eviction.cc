#include "engine/eviction.h"

#include <optional>

#include "common/check.h"

namespace sluice {
namespace {

// Candidates ordered by a per-block score (smaller first), ties by the order they became candidates.
class OrderedPolicy : public EvictionPolicy {
 public:
  explicit OrderedPolicy(int32_t num_blocks) : last_use_(num_blocks, 0), uses_(num_blocks, 0), in_set_(num_blocks) {}

  void touch(int32_t b, double now) override {
    const bool was = in_set_[b].has_value();
    if (was) remove_candidate(b);
    last_use_[b] = now;
    ++uses_[b];
    if (was) add_candidate(b);
  }
  void add_candidate(int32_t b) override {
    SLUICE_CHECK(!in_set_[b]) << "block " << b << " is a candidate already";
    Key k = key(b, next_order_++);
    candidates_.insert(k);
    in_set_[b] = k;
  }
  void remove_candidate(int32_t b) override {
    if (!in_set_[b]) return;
    candidates_.erase(*in_set_[b]);
    in_set_[b].reset();
  }
  bool has_candidate() const override { return !candidates_.empty(); }
  int32_t victim() const override { return std::get<3>(*candidates_.begin()); }
  void forget(int32_t b) override {
    remove_candidate(b);
    last_use_[b] = 0;
    uses_[b] = 0;
  }

 protected:
  // (primary score, last use, order, block)
  using Key = std::tuple<double, double, uint64_t, int32_t>;
  virtual Key key(int32_t b, uint64_t order) const = 0;

  std::vector<double> last_use_;
  std::vector<int64_t> uses_;

 private:
  std::vector<std::optional<Key>> in_set_;
  std::set<Key> candidates_;
  uint64_t next_order_ = 0;
};

class LruPolicy : public OrderedPolicy {
 public:
  using OrderedPolicy::OrderedPolicy;
  std::string_view name() const override { return "lru"; }

 protected:
  Key key(int32_t b, uint64_t order) const override { return {0.0, last_use_[b], order, b}; }
};

class LfuPolicy : public OrderedPolicy {
 public:
  using OrderedPolicy::OrderedPolicy;
  std::string_view name() const override { return "lfu"; }

 protected:
  Key key(int32_t b, uint64_t order) const override {
    return {static_cast<double>(uses_[b]), last_use_[b], order, b};
  }
};

class PinnedLruPolicy : public LruPolicy {
 public:
  using LruPolicy::LruPolicy;
  std::string_view name() const override { return "pinned"; }
  bool protects_pinned() const override { return true; }
};

}  // namespace

std::vector<std::string_view> eviction_policy_names() { return {"lru", "lfu", "pinned"}; }

Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name, int32_t num_blocks) {
  if (name == "lru") return std::make_unique<LruPolicy>(num_blocks);
  if (name == "lfu") return std::make_unique<LfuPolicy>(num_blocks);
  if (name == "pinned") return std::make_unique<PinnedLruPolicy>(num_blocks);
  return Error(StatusCode::kInvalid, "unknown KV eviction policy '{}' (choices: lru, lfu, pinned)", name);
}

}  // namespace sluice
