// PrefixIndex: the router's approximate picture of which prompt prefixes each replica holds in
// its KV cache, fed by its own routing decisions (policies/cache_aware.cc).
//
// A prompt is cut into fixed-size chunks and each chunk is named by a chained hash: h_1 =
// H(chunk_1), h_i = H(h_(i-1), chunk_i), so a hash stands for the whole prefix up to its chunk,
// as the engine's own prefix cache names blocks. The index maps a hash to the replicas believed
// to hold that prefix, each with an expiry: short for a prefix routed there but not yet served
// (a prediction, so a burst of requests with a new shared prefix lands on one replica before the
// first one finishes), long once a request with it completed there. Bounded: past max_entries
// (hash, replica) pairs the least recently used hash goes; expired holders are dropped when met.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <list>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "router/backend.h"

namespace sluice::router {

// The chained hashes of `text`'s whole chunks of `chunk_bytes` (a partial last chunk is not
// named): hash i stands for the prefix up to the end of chunk i.
std::vector<uint64_t> chunk_hashes(std::string_view text, size_t chunk_bytes);

class PrefixIndex {
 public:
  PrefixIndex(size_t chunk_bytes, size_t max_entries);

  // The chained hashes of `text`'s whole chunks (a partial last chunk is not named).
  std::vector<uint64_t> chunk_hashes(std::string_view text) const;
  // Per replica (indices 0..num_backends-1): how many leading hashes it holds, unexpired.
  std::vector<int32_t> match(const std::vector<uint64_t>& hashes, size_t num_backends, Clock::time_point now);
  // `backend` holds every prefix in `hashes` until now + ttl (an existing later expiry is kept).
  void insert(const std::vector<uint64_t>& hashes, int backend, Clock::duration ttl, Clock::time_point now);
  // Nothing is believed of `backend` any more (its slot holds another replica now).
  void forget(int backend);
  size_t num_entries() const;
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  struct Holder {
    int backend;
    Clock::time_point expires;
  };
  struct Entry {
    std::vector<Holder> holders;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front: most recent)
  };
  void evict() SLUICE_REQUIRES(mu_);

  const size_t chunk_bytes_, max_entries_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_ SLUICE_GUARDED_BY(mu_);
  std::list<uint64_t> lru_ SLUICE_GUARDED_BY(mu_);
  size_t num_holders_ SLUICE_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::router
