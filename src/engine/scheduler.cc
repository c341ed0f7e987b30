#include "engine/scheduler.h"

#include <algorithm>

#include "common/check.h"

namespace sluice {

Scheduler::Scheduler(const SchedulerConfig& config, KvCache& cache) : config_(config), cache_(cache) {
  SLUICE_CHECK(config.max_num_seqs > 0 && config.max_batch_tokens > 0 && config.block_size == cache.block_size());
}

void Scheduler::add(SeqId seq_id, std::vector<int32_t> prompt, int32_t priority, bool score_prompt) {
  SLUICE_CHECK(!prompt.empty());
  Seq s;
  s.id = seq_id;
  s.priority = priority;
  s.score_prompt = score_prompt;
  s.arrival = next_arrival_++;
  s.num_prompt = static_cast<int32_t>(prompt.size());
  s.tokens = std::move(prompt);
  const auto [it, inserted] = seqs_.emplace(seq_id, std::move(s));
  SLUICE_CHECK(inserted) << "sequence " << seq_id << " added twice";
  waiting_.emplace(key(it->second), seq_id);
}

int32_t Scheduler::num_cached_tokens(SeqId seq_id) const { return std::max(0, seqs_.at(seq_id).num_cached); }

int32_t Scheduler::num_output(SeqId seq_id) const {
  const Seq& s = seqs_.at(seq_id);
  return static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
}

ScheduleOutput Scheduler::schedule() {
  ScheduleOutput out;
  int32_t budget = config_.max_batch_tokens;
  schedule_running(out, budget);
  schedule_waiting(out, budget);
  schedule_drafts(out, budget);
  return out;
}

void Scheduler::schedule_drafts(ScheduleOutput& out, int32_t& budget) {
  // Last, so drafts take only what every running and admitted sequence left: the rest of the
  // budget and blocks that hold nothing (never a cached prefix's: a rejected draft would have
  // evicted it for nothing). Nobody is preempted or delayed for a draft.
  const int32_t bs = config_.block_size;
  for (ScheduledSeq& ss : out.seqs) {
    Seq& s = seqs_.at(ss.seq_id);
    if (budget <= 0) break;
    if (s.draft.empty() || !ss.sample || ss.token_ids.size() != 1) continue;  // decodes only
    const int64_t room = (int64_t(s.blocks.size()) + cache_.num_free()) * bs - (ss.start + 1);
    const auto n = static_cast<int32_t>(std::clamp<int64_t>(room, 0, std::min<int64_t>(budget, s.draft.size())));
    if (n == 0) continue;
    grow(s, 1 + n);  // num_computed is still ss.start
    ss.token_ids.insert(ss.token_ids.end(), s.draft.begin(), s.draft.begin() + n);
    ss.num_draft = n;
    ss.block_table = s.blocks;
    out.num_tokens += n;
    budget -= n;
  }
  for (auto& [id, s] : seqs_) s.draft.clear();  // drafts last one step
}

int32_t Scheduler::fitting_tokens(const Seq& s, int32_t want) const {
  const int64_t capacity = (int64_t(s.blocks.size()) + cache_.num_allocatable()) * config_.block_size - s.num_computed;
  return static_cast<int32_t>(std::clamp<int64_t>(capacity, 0, want));
}

void Scheduler::grow(Seq& s, int32_t num_new) {
  const size_t needed = (s.num_computed + num_new + config_.block_size - 1) / config_.block_size;
  while (s.blocks.size() < needed) s.blocks.push_back(cache_.allocate());
}

void Scheduler::release_blocks(Seq& s) {
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) cache_.release(*it);  // children first
  s.blocks.clear();
  s.num_indexed = 0;
}

void Scheduler::set_draft(SeqId seq_id, std::vector<int32_t> draft) { seqs_.at(seq_id).draft = std::move(draft); }

bool Scheduler::is_decoding(SeqId seq_id) const {
  const Seq& s = seqs_.at(seq_id);
  return s.running && static_cast<int32_t>(s.tokens.size()) - s.num_computed == 1;
}

void Scheduler::preempt(Seq& s, ScheduleOutput& out) {
  release_blocks(s);
  s.draft.clear();
  s.num_computed = 0;
  s.running = false;
  running_.erase(key(s));
  waiting_.emplace(key(s), s.id);
  out.preempted.push_back(s.id);
  ++num_preemptions_;
}

void Scheduler::emit(Seq& s, int32_t num_new, ScheduleOutput& out, int32_t& budget) {
  grow(s, num_new);
  ScheduledSeq ss;
  ss.seq_id = s.id;
  ss.start = s.num_computed;
  ss.token_ids.assign(s.tokens.begin() + s.num_computed, s.tokens.begin() + s.num_computed + num_new);
  ss.block_table = s.blocks;
  ss.sample = s.num_computed + num_new == static_cast<int32_t>(s.tokens.size());
  if (s.score_prompt) {
    // Positions start..start+k-1 score the prompt tokens after them.
    const int32_t k = std::clamp(s.num_prompt - 1 - s.num_computed, 0, num_new);
    ss.score_targets.assign(s.tokens.begin() + s.num_computed + 1, s.tokens.begin() + s.num_computed + 1 + k);
  }
  out.seqs.push_back(std::move(ss));
  out.num_tokens += num_new;
  budget -= num_new;
}

void Scheduler::schedule_running(ScheduleOutput& out, int32_t& budget) {
  auto is_decode = [](const Seq& s) { return static_cast<int32_t>(s.tokens.size()) - s.num_computed == 1; };
  // Decodes not yet visited; a prompt chunk leaves them one token each.
  int32_t decodes_behind = 0;
  for (const auto& [k, id] : running_) decodes_behind += is_decode(seqs_.at(id));

  for (auto it = running_.begin(); it != running_.end() && budget > 0; ++it) {
    Seq& s = seqs_.at(it->second);
    const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.num_computed;
    const bool decode = remaining == 1;
    if (decode) --decodes_behind;
    const int32_t want = decode ? 1 : std::min(remaining, budget - decodes_behind);
    if (want <= 0) continue;
    int32_t n = fitting_tokens(s, want);
    bool self_preempted = false;
    while (n == 0) {
      // Out of blocks: the lowest-priority, latest-arrived running sequence gives way.
      Seq& victim = seqs_.at(std::prev(running_.end())->second);
      if (&victim == &s) {
        self_preempted = true;
        break;
      }
      if (is_decode(victim)) --decodes_behind;
      preempt(victim, out);
      n = fitting_tokens(s, want);
    }
    if (self_preempted) {
      preempt(s, out);  // s was the last running sequence: nothing follows it
      break;
    }
    emit(s, n, out, budget);
  }
}

std::optional<Scheduler::BlockId> Scheduler::pending_block(const Seq& s) const {
  const int32_t bs = config_.block_size;
  const int32_t b = s.num_indexed;
  if (!cache_.prefix_caching() || b * bs != s.num_computed - s.num_computed % bs) return std::nullopt;
  if (int64_t{b + 1} * bs > static_cast<int64_t>(s.tokens.size())) return std::nullopt;
  return BlockId{b == 0 ? -1 : s.blocks[b - 1], std::span(s.tokens).subspan(int64_t{b} * bs, bs)};
}

bool Scheduler::is_being_computed(const BlockId& b, const std::vector<BlockId>& pending) const {
  return std::any_of(pending.begin(), pending.end(), [&](const BlockId& p) {
    return p.parent == b.parent && std::equal(p.tokens.begin(), p.tokens.end(), b.tokens.begin(), b.tokens.end());
  });
}

Scheduler::Candidate Scheduler::pick_waiting(const std::vector<BlockId>& pending) const {
  const int32_t bs = config_.block_size;
  Candidate best;
  const int32_t priority = waiting_.empty() ? 0 : seqs_.at(waiting_.begin()->second).priority;
  int32_t considered = 0;
  for (auto it = waiting_.begin(); it != waiting_.end() && considered < std::max(1, config_.cache_aware_window); ++it) {
    const Seq& s = seqs_.at(it->second);
    // Only within the first priority class, even when all of it waits for a block being
    // computed (the burst rule below): a later class never goes ahead of it.
    if (s.priority != priority) break;
    const auto num_tokens = static_cast<int32_t>(s.tokens.size());
    // A prompt to score is computed in full: neither a cached prefix nor one being computed helps.
    std::vector<int32_t> hit = s.score_prompt ? std::vector<int32_t>() : cache_.match(s.tokens, num_tokens - 1);
    const auto num_hit = static_cast<int32_t>(hit.size()) * bs;
    if (!s.score_prompt && num_hit + bs <= num_tokens - 1 && !pending.empty()) {
      const BlockId next{hit.empty() ? -1 : hit.back(), std::span(s.tokens).subspan(num_hit, bs)};
      if (is_being_computed(next, pending)) continue;  // share that prefix when it is done
    }
    ++considered;
    if (!best.seq) {
      best = {it->second, std::move(hit)};
      if (s.num_bypassed >= config_.max_bypass) break;  // waited long enough: first in line
      continue;
    }
    if (hit.size() > best.hit.size()) best = {it->second, std::move(hit)};
  }
  return best;
}

void Scheduler::schedule_waiting(ScheduleOutput& out, int32_t& budget) {
  if (!out.preempted.empty()) return;
  const int32_t bs = config_.block_size;
  // Blocks that running sequences are computing now (or next), for the burst rule.
  std::vector<BlockId> pending;
  for (const auto& [k, id] : running_) {
    if (auto p = pending_block(seqs_.at(id))) pending.push_back(*p);
  }
  while (budget > 0 && num_running() < config_.max_num_seqs) {
    Candidate c = pick_waiting(pending);
    if (!c.seq) break;
    Seq& s = seqs_.at(*c.seq);
    const auto num_tokens = static_cast<int32_t>(s.tokens.size());
    const auto num_hit = static_cast<int32_t>(c.hit.size()) * bs;
    const int64_t free_after_hit = cache_.num_allocatable() - cache_.count_unheld(c.hit);
    const int32_t n = static_cast<int32_t>(std::min<int64_t>({num_tokens - num_hit, budget, free_after_hit * bs}));
    if (n <= 0) break;  // the chosen one waits for room; nobody else jumps ahead of it
    // Everyone of its priority that arrived before it was passed over once more.
    for (auto it = waiting_.begin(); it != waiting_.end() && it->second != s.id; ++it) {
      Seq& earlier = seqs_.at(it->second);
      if (earlier.priority == s.priority) ++earlier.num_bypassed;
    }
    waiting_.erase(key(s));
    running_.emplace(key(s), s.id);
    s.running = true;
    cache_.acquire(c.hit);
    s.blocks = std::move(c.hit);
    s.num_indexed = static_cast<int32_t>(s.blocks.size());
    s.num_computed = num_hit;
    // A lookup, counted at first admission (not again after a preemption): neither a prompt to
    // score (computed in full, never looked up) nor anything with the cache off lowers the rate.
    const bool first_admission = s.num_cached < 0;
    if (first_admission) s.num_cached = num_hit;
    if (first_admission && cache_.prefix_caching() && !s.score_prompt) {
      cache_stats_.query_tokens += s.num_prompt;
      cache_stats_.hit_tokens += num_hit;
      ++cache_stats_.query_requests;
      cache_stats_.hit_requests += num_hit > 0;
    }
    emit(s, n, out, budget);
    if (auto p = pending_block(s)) pending.push_back(*p);
  }
}

void Scheduler::index_full_blocks(Seq& s) {
  if (!cache_.prefix_caching()) return;
  const int32_t bs = config_.block_size;
  while (int64_t{s.num_indexed + 1} * bs <= s.num_computed) {
    const int32_t b = s.num_indexed;
    const int32_t parent = b == 0 ? -1 : s.blocks[b - 1];
    const int32_t cached = cache_.commit(s.blocks[b], parent, std::span(s.tokens).subspan(int64_t{b} * bs, bs));
    if (cached != s.blocks[b]) {
      // Indexed meanwhile by another sequence, with bit-identical keys and values: share it.
      cache_.acquire(std::span(&cached, 1));
      cache_.release(s.blocks[b]);
      s.blocks[b] = cached;
    }
    ++s.num_indexed;
  }
}

void Scheduler::update(const ScheduleOutput& out, std::span<const SampledToken> sampled) {
  // Each sequence's sampled entries are together: where they start.
  std::unordered_map<SeqId, size_t> first;
  for (size_t i = sampled.size(); i-- > 0;) first[sampled[i].seq_id] = i;
  size_t num_used = 0;
  for (const ScheduledSeq& ss : out.seqs) {
    Seq& s = seqs_.at(ss.seq_id);
    SLUICE_CHECK(s.running && s.num_computed == ss.start) << "sequence " << ss.seq_id << " changed within a step";
    const auto num_known = static_cast<int32_t>(ss.token_ids.size()) - ss.num_draft;
    s.num_computed += num_known;
    if (s.num_computed >= s.num_prompt) s.score_prompt = false;  // scored: a recompute may use the cache
    if (ss.sample) {
      SLUICE_CHECK(s.num_computed == static_cast<int32_t>(s.tokens.size())) << "sequence " << ss.seq_id << " sampled early";
      const auto it = first.find(ss.seq_id);
      SLUICE_CHECK(it != first.end()) << "sequence " << ss.seq_id << " was not sampled";
      const size_t next = it->second;
      size_t end = next;
      while (end < sampled.size() && sampled[end].seq_id == ss.seq_id) ++end;
      SLUICE_CHECK(end > next && end - next <= static_cast<size_t>(ss.num_draft) + 1)
          << "sequence " << ss.seq_id << ": " << end - next << " sampled tokens for " << ss.num_draft << " drafts";
      for (size_t i = next; i < end; ++i) {
        if (i + 1 < end) {  // an accepted draft: its KV was computed in this step
          SLUICE_CHECK(sampled[i].token_id == ss.token_ids[num_known + (i - next)]) << "accepted a token not drafted";
          ++s.num_computed;
        }
        s.tokens.push_back(sampled[i].token_id);
      }
      num_used += end - next;
      // The rejected drafts' KV is dropped: their blocks go back (never indexed; a partial last
      // block keeps stale entries past num_computed, which the next step overwrites).
      const size_t needed = (s.num_computed + config_.block_size - 1) / config_.block_size;
      while (s.blocks.size() > needed) {
        cache_.release(s.blocks.back());
        s.blocks.pop_back();
      }
    }
    index_full_blocks(s);
  }
  SLUICE_CHECK(num_used == sampled.size()) << "sampled tokens of sequences not scheduled to sample";
}

void Scheduler::finish(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  release_blocks(s);
  (s.running ? running_ : waiting_).erase(key(s));
  seqs_.erase(it);
}

}  // namespace sluice
