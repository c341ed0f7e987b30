// Scheduler: continuous batching of many sequences under a sequence budget and a token budget.
//
// Every sequence has `tokens` (prompt, then the outputs so far) and `num_computed` (how many of
// them have their keys/values in the KV cache). A step hands each chosen sequence the next
// tokens to compute; there are no prefill and decode modes: a new prompt, a prompt chunk, a
// decode token and a recompute after preemption are all "the next num_new tokens". When a
// chunk reaches the last known token, the runner samples the next one.
//
// schedule(), in named phases:
//   1. running sequences, in priority order (lower `priority` value first, then arrival):
//      each gets min(remaining, budget) tokens, except that a chunk of a prompt leaves one
//      token of the budget for every running decode behind it, so chunked prefill never stalls
//      decodes. A sequence whose tokens need a block when none is free preempts the running
//      sequence of lowest priority that arrived last (possibly itself): its blocks are freed
//      and it waits, first in line of its priority, to be recomputed. A prompt chunk shrinks to
//      the blocks that are free before it preempts anyone.
//   2. waiting sequences, by priority, while fewer than max_num_seqs run and budget and free
//      blocks remain; skipped in a step that preempted, so a preempted sequence is not
//      immediately re-admitted at another's expense. Within the first priority class, the one
//      with the longest cached prefix among the first cache_aware_window goes first (ties: the
//      earliest), unless one ahead of it was passed over max_bypass times already. An admitted
//      sequence first takes the longest cached prefix of its tokens (KvCache::match) and
//      computes only the rest. NOTE: when every token hits, the last one is still computed,
//      to get the logits that sample the next token. A sequence whose next block is being
//      computed right now by a running sequence (a burst of requests with one new system
//      prompt) waits for it instead of computing it again.
//
// Speculative decoding: a running sequence may carry draft tokens (set_draft, before
// schedule()). When it is decoding (one known token left), it is handed that token and, in a
// last phase after every running and admitted sequence had its share, as many of its drafts as
// the rest of the budget and the free blocks allow (never evicting a cached block, never
// preempting or delaying anyone): "k draft tokens + 1" is just more tokens. The runner
// verifies them and returns the accepted drafts and one more sampled token; update() keeps the
// KV of the accepted ones and rolls back the rest: num_computed stops after the last accepted
// draft, and blocks past it are released (they were never indexed, so the prefix cache never
// sees an unverified token). Drafts last one step.
//
// After each step, blocks that became full are indexed in the prefix cache (KvCache::commit),
// outputs included, so the next turn of a conversation finds its history. If the same prefix
// was indexed meanwhile by another sequence, the sequence switches to that block (the keys and
// values are bit-identical: batch invariance) and frees its own.
//
// The scheduler never sees a tensor or a token's text; finishing a sequence (end of text, stop
// string, length, cancel) is the engine's call: finish().
//
// Invariants: no step schedules more than max_num_seqs sequences or max_batch_tokens tokens;
// a running sequence holds exactly ceil(num_computed' / block_size) blocks after the step it
// was scheduled in (num_computed' = num_computed + num_new); waiting sequences hold none.
// Blocks are released children first, so a cached prefix is evicted from its end.
// REQUIRES of the caller: every sequence fits the whole pool alone (tokens it will ever hold
// <= num_blocks * block_size), so a sequence running alone is never preempted.
//
// Thread-safety: owned by the engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"

namespace sluice {

using SeqId = uint64_t;

struct SchedulerConfig {
  int32_t max_num_seqs = 32;        // sequences in one step (the batch size)
  int32_t max_batch_tokens = 512;   // tokens in one step, summed over sequences
  int32_t block_size = 16;          // tokens per KV block
  // Cache-aware admission: among the first cache_aware_window waiting sequences of the first
  // priority class, admit the one with the longest cached prefix (1: plain FCFS); a sequence
  // passed over max_bypass times goes first, so none starves.
  int32_t cache_aware_window = 16;
  int32_t max_bypass = 16;
};

// One sequence's share of a step.
struct ScheduledSeq {
  SeqId seq_id = 0;
  int32_t start = 0;                  // position of the first token computed in this step
  std::vector<int32_t> token_ids;     // [num_new] tokens at positions start..start+num_new-1
  std::vector<int32_t> block_table;   // [blocks held] physical blocks, in position order
  bool sample = false;                // the chunk ends at the last known token: sample the next
  int32_t num_draft = 0;              // the last num_draft token_ids are draft tokens (sample is true)
  // Prompt scoring (add(..., score_prompt)): the logits of token_ids[i] give the logprob of
  // score_targets[i], the prompt token after it, for i < score_targets.size().
  std::vector<int32_t> score_targets;
};

struct ScheduleOutput {
  std::vector<ScheduledSeq> seqs;   // [num_seqs]
  std::vector<SeqId> preempted;     // sequences preempted in this step
  int32_t num_tokens = 0;           // sum of token_ids sizes

  bool empty() const { return seqs.empty(); }
};

// One sampled token, for a ScheduledSeq with sample == true. A sequence with drafts has one
// entry per accepted draft token (equal to it, in order), then the token sampled after them.
struct SampledToken {
  SeqId seq_id = 0;
  int32_t token_id = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCache& cache);

  // Queues a new sequence. REQUIRES: an unused id, a non-empty prompt. `score_prompt`: every
  // prompt token is computed with its logits wanted (ScheduledSeq::score_targets), so no prefix
  // of the prompt is taken from the cache until all of it was computed once; a sequence
  // preempted before that recomputes, and scores, the prompt from its start.
  void add(SeqId seq_id, std::vector<int32_t> prompt, int32_t priority, bool score_prompt = false);

  ScheduleOutput schedule();

  // Closes a step: advances num_computed of every scheduled sequence past its verified tokens,
  // appends the sampled tokens and releases the blocks of rejected drafts. REQUIRES: `out` is
  // the last schedule() result, no sequence of it was finished, and `sampled` lists each
  // sampled sequence's entries together.
  void update(const ScheduleOutput& out, std::span<const SampledToken> sampled);

  // Draft tokens for the next step of a running sequence (replacing any). Ignored unless the
  // sequence is decoding when scheduled. REQUIRES: has(seq_id).
  void set_draft(SeqId seq_id, std::vector<int32_t> draft);
  // Running, with one known token left to compute: the next step can verify drafts.
  bool is_decoding(SeqId seq_id) const;
  // Prompt + outputs so far. REQUIRES: has(seq_id).
  std::span<const int32_t> tokens(SeqId seq_id) const { return seqs_.at(seq_id).tokens; }

  // Removes a waiting or running sequence and frees its blocks. No-op for an unknown id.
  void finish(SeqId seq_id);

  bool has(SeqId seq_id) const { return seqs_.contains(seq_id); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Prompt tokens that came from the prefix cache when the sequence was first admitted
  // (0 before). REQUIRES: has(seq_id).
  int32_t num_cached_tokens(SeqId seq_id) const;

  // Prefix cache accounting over first admissions that look the cache up (vLLM's
  // prefix_cache_queries / _hits): not prompts to score, nothing with the cache off.
  struct CacheStats {
    int64_t query_tokens = 0;      // prompt tokens looked up
    int64_t hit_tokens = 0;        // of those, found cached
    int64_t query_requests = 0;    // sequences that looked it up
    int64_t hit_requests = 0;      // of those, with at least one cached block
  };
  const CacheStats& cache_stats() const { return cache_stats_; }
  // Output tokens so far (all tokens minus the prompt). REQUIRES: has(seq_id).
  int32_t num_output(SeqId seq_id) const;
  const SchedulerConfig& config() const { return config_; }

 private:
  struct Seq {
    SeqId id = 0;
    int32_t priority = 0;
    uint64_t arrival = 0;
    std::vector<int32_t> tokens;  // prompt + outputs
    int32_t num_prompt = 0;
    int32_t num_computed = 0;
    std::vector<int32_t> blocks;
    int32_t num_indexed = 0;      // leading blocks indexed in the prefix cache
    int32_t num_cached = -1;      // prompt tokens from the cache at first admission (-1: not yet)
    int32_t num_bypassed = 0;     // times a later sequence of its priority was admitted first
    bool running = false;
    bool score_prompt = false;    // until the prompt was computed once
    std::vector<int32_t> draft;   // for the next step (set_draft)
  };
  // Priority order: lower priority value first, then earlier arrival.
  using Key = std::pair<int32_t, uint64_t>;
  static Key key(const Seq& s) { return {s.priority, s.arrival}; }

  void schedule_running(ScheduleOutput& out, int32_t& budget);
  void schedule_waiting(ScheduleOutput& out, int32_t& budget);
  // Tokens of `s` (up to `want`) that fit in its blocks plus the free ones.
  int32_t fitting_tokens(const Seq& s, int32_t want) const;
  void grow(Seq& s, int32_t num_new);
  void preempt(Seq& s, ScheduleOutput& out);
  void release_blocks(Seq& s);
  void emit(Seq& s, int32_t num_new, ScheduleOutput& out, int32_t& budget);
  void schedule_drafts(ScheduleOutput& out, int32_t& budget);
  void index_full_blocks(Seq& s);
  // Identity of the next block `s` will compute, if it is a full block of known tokens.
  struct BlockId {
    int32_t parent;                   // -1: the first block
    std::span<const int32_t> tokens;  // block_size tokens
  };
  std::optional<BlockId> pending_block(const Seq& s) const;
  bool is_being_computed(const BlockId& b, const std::vector<BlockId>& pending) const;
  struct Candidate {
    std::optional<SeqId> seq;
    std::vector<int32_t> hit;  // its cached prefix
  };
  // The waiting sequence to admit next (cache-aware, bounded bypass, burst rule).
  Candidate pick_waiting(const std::vector<BlockId>& pending) const;

  SchedulerConfig config_;
  KvCache& cache_;
  CacheStats cache_stats_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::map<Key, SeqId> running_;
  std::map<Key, SeqId> waiting_;
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace sluice
