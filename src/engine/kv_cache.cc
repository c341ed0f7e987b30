#include "engine/kv_cache.h"

#include <algorithm>

#include "common/check.h"

namespace sluice {

KvCache::KvCache(const KvCacheConfig& config, std::function<double()> clock)
    : config_(config), clock_(std::move(clock)), blocks_(config.num_blocks) {
  SLUICE_CHECK(config.num_blocks > 0 && config.block_size > 0);
  SLUICE_CHECK(config.pinned_prefixes.size() <= 64) << "at most 64 pinned prefixes";
  auto policy = make_eviction_policy(config.eviction, config.num_blocks);
  SLUICE_CHECK(policy.has_value()) << policy.error().message();
  policy_ = std::move(*policy);
  free_.reserve(config.num_blocks);
  // Block 0 on top: a fresh cache hands out ids in ascending order.
  for (int32_t b = config.num_blocks - 1; b >= 0; --b) free_.push_back(b);
  pinned_reserve_ = pinned_reserve(config, policy_->protects_pinned());
}

int32_t KvCache::pinned_reserve(const KvCacheConfig& config, bool policy_keeps_pinned) {
  if (!policy_keeps_pinned || !config.prefix_caching) return 0;
  // A prefix's blocks that an earlier prefix shares (a common start) are counted once.
  const auto& pins = config.pinned_prefixes;
  int64_t reserve = 0;
  for (size_t i = 0; i < pins.size(); ++i) {
    int64_t shared = 0;
    for (size_t j = 0; j < i; ++j) {
      const auto lcp = std::ranges::mismatch(pins[i], pins[j]).in1 - pins[i].begin();
      shared = std::max<int64_t>(shared, lcp / config.block_size);
    }
    reserve += static_cast<int64_t>(pins[i].size()) / config.block_size - shared;
  }
  return static_cast<int32_t>(std::min<int64_t>(reserve, INT32_MAX));
}

int32_t KvCache::num_pinned_cached() const { return policy_->protects_pinned() ? num_pinned_cached_ : 0; }

int32_t KvCache::pinned_blocks_on(std::span<const int32_t> tokens) const {
  if (pinned_reserve_ == 0) return 0;
  int64_t on = 0;
  for (const std::vector<int32_t>& p : config_.pinned_prefixes) {
    const auto lcp = std::ranges::mismatch(tokens, p).in1 - tokens.begin();
    on = std::max<int64_t>(on, lcp / config_.block_size);
  }
  return static_cast<int32_t>(on);
}

uint64_t KvCache::block_hash(int32_t parent_id, std::span<const int32_t> tokens) const {
  // FNV-1a over the parent id and the tokens; equality is checked on the tokens themselves.
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 1099511628211ull;
  };
  mix(static_cast<uint32_t>(parent_id));
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  return h;
}

int32_t KvCache::find(int32_t parent_id, std::span<const int32_t> tokens) const {
  auto [begin, end] = index_.equal_range(block_hash(parent_id, tokens));
  for (auto it = begin; it != end; ++it) {
    const Block& b = blocks_[it->second];
    if (b.parent == parent_id && std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return -1;
}

std::vector<int32_t> KvCache::match(std::span<const int32_t> tokens, int32_t max_tokens) const {
  std::vector<int32_t> out;
  if (!config_.prefix_caching) return out;
  const int32_t bs = config_.block_size;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  int32_t parent = -1;
  for (int64_t start = 0; start + bs <= limit; start += bs) {
    const int32_t b = find(parent, tokens.subspan(start, bs));
    if (b < 0) break;
    out.push_back(b);
    parent = b;
  }
  return out;
}

int32_t KvCache::count_unheld(std::span<const int32_t> blocks) const {
  return static_cast<int32_t>(std::count_if(blocks.begin(), blocks.end(), [&](int32_t b) {
    return blocks_[b].ref_count == 0 && !(policy_->protects_pinned() && blocks_[b].pin_mask != 0);
  }));
}

bool KvCache::evictable_leaf(const Block& b) const {
  return b.indexed && b.ref_count == 0 && b.num_indexed_children == 0 &&
         !(policy_->protects_pinned() && b.pin_mask != 0);
}

void KvCache::update_candidate(int32_t block_id) {
  if (evictable_leaf(blocks_[block_id])) {
    policy_->remove_candidate(block_id);  // no-op when absent
    policy_->add_candidate(block_id);
  } else {
    policy_->remove_candidate(block_id);
  }
}

void KvCache::acquire(std::span<const int32_t> blocks) {
  const double now = clock_();
  for (int32_t id : blocks) {
    Block& b = blocks_[id];
    SLUICE_CHECK(b.indexed) << "block " << id << " is not cached";
    if (b.ref_count++ == 0) {
      --num_cached_;
      num_pinned_cached_ -= b.pin_mask != 0;
      ++num_held_;
      policy_->remove_candidate(id);
    }
    policy_->touch(id, now);
  }
}

void KvCache::evict(int32_t block_id) {
  Block& b = blocks_[block_id];
  auto [begin, end] = index_.equal_range(b.hash);
  for (auto it = begin; it != end; ++it) {
    if (it->second == block_id) {
      index_.erase(it);
      break;
    }
  }
  policy_->forget(block_id);
  --num_cached_;
  num_pinned_cached_ -= b.pin_mask != 0;
  ++num_evictions_;
  const int32_t parent = b.parent;
  b = Block{};
  if (parent >= 0) {
    --blocks_[parent].num_indexed_children;
    update_candidate(parent);  // may have become a leaf
  }
}

int32_t KvCache::allocate() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    SLUICE_CHECK(policy_->has_candidate()) << "no KV block to allocate";
    id = policy_->victim();
    evict(id);
  }
  blocks_[id].ref_count = 1;
  ++num_held_;
  return id;
}

void KvCache::release(int32_t block_id) {
  Block& b = blocks_[block_id];
  SLUICE_CHECK(b.ref_count > 0) << "block " << block_id << " released twice";
  if (--b.ref_count > 0) return;
  --num_held_;
  if (!b.indexed) {
    b = Block{};
    free_.push_back(block_id);
    return;
  }
  ++num_cached_;
  num_pinned_cached_ += b.pin_mask != 0;
  policy_->touch(block_id, clock_());
  update_candidate(block_id);
}

int32_t KvCache::commit(int32_t block_id, int32_t parent_id, std::span<const int32_t> tokens) {
  Block& b = blocks_[block_id];
  SLUICE_CHECK(b.ref_count > 0 && !b.indexed) << "block " << block_id;
  SLUICE_CHECK(static_cast<int32_t>(tokens.size()) == config_.block_size);
  SLUICE_CHECK(parent_id < 0 || blocks_[parent_id].indexed) << "parent " << parent_id << " is not cached";
  if (!config_.prefix_caching) return block_id;
  if (const int32_t existing = find(parent_id, tokens); existing >= 0) return existing;
  b.indexed = true;
  b.parent = parent_id;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.hash = block_hash(parent_id, tokens);
  index_.emplace(b.hash, block_id);
  // Pinned prefixes this block lies on: those its parent lies on whose next block is this one.
  b.depth = parent_id < 0 ? 0 : blocks_[parent_id].depth + 1;
  const int64_t depth = b.depth;
  uint64_t mask = parent_id < 0 ? ~uint64_t{0} : blocks_[parent_id].pin_mask;
  for (size_t i = 0; i < 64 && mask; ++i) {
    if (!(mask >> i & 1)) continue;
    const auto& p = i < config_.pinned_prefixes.size() ? config_.pinned_prefixes[i] : std::vector<int32_t>{};
    const int64_t start = depth * config_.block_size;
    const bool on = static_cast<int64_t>(p.size()) >= start + config_.block_size &&
                    std::equal(tokens.begin(), tokens.end(), p.begin() + start);
    if (!on) mask &= ~(uint64_t{1} << i);
  }
  b.pin_mask = mask;
  if (parent_id >= 0) {
    ++blocks_[parent_id].num_indexed_children;
    policy_->remove_candidate(parent_id);  // no longer a leaf (it is held anyway)
  }
  return block_id;
}

}  // namespace sluice
