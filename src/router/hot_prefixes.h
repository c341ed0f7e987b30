// HotPrefixes: which prompt prefixes the router's traffic shares most, with a request that
// carries each, so that a new version's replicas can be sent those prefixes before they take
// traffic (a canary starts with a cold KV cache; rollout.h's warm step).
//
// Prompts are cut into the prefix index's chunks (prefix_index.h: chained hashes of chunk_bytes
// of text, so a hash names the whole prefix up to its chunk). Each hash counts the requests whose
// prompt had that prefix, and remembers the latest such request. The hottest prefixes are those
// most requests shared (at least two), the longer first among equals: a system prompt every
// request starts with is one prefix, counted as often as it was sent, and its deepest chunk
// stands for it. Bounded: max_hashes counted hashes (the least recently seen go) and
// max_samples kept requests (the oldest go), each at most kMaxSampleBytes.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace sluice::router {

class HotPrefixes {
 public:
  static constexpr size_t kMaxSampleBytes = 64 << 10;
  explicit HotPrefixes(size_t chunk_bytes = 64, size_t max_hashes = 8192, size_t max_samples = 512);

  // A request to `target` with this body, whose prompt text (router.h's prompt_text) is `prompt`.
  void observe(std::string_view prompt, std::string_view target, std::string_view body);

  struct Hot {
    std::string target, body;  // a request that carries the prefix
    int64_t requests = 0;      // how many requests shared the prefix
    size_t prefix_bytes = 0;   // its length in prompt text
  };
  // The `n` hottest prefixes, hottest first, each with a distinct request.
  std::vector<Hot> hottest(size_t n) const;

 private:
  struct Counted {
    int64_t requests = 0;
    int32_t depth = 0;     // chunks
    uint64_t sample = 0;   // the latest request with the prefix
    std::list<uint64_t>::iterator lru;
  };
  struct Sample {
    std::string target, body;
  };
  const size_t chunk_bytes_, max_hashes_, max_samples_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Counted> counts_ SLUICE_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ SLUICE_GUARDED_BY(mu_);  // front: most recently seen
  std::map<uint64_t, Sample> samples_ SLUICE_GUARDED_BY(mu_);
  uint64_t next_sample_ SLUICE_GUARDED_BY(mu_) = 1;
};

}  // namespace sluice::router
