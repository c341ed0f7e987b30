#include "engine/scheduler.h"

#include <algorithm>

#include "common/check.h"

namespace sluice {

Scheduler::Scheduler(const SchedulerConfig& config, BlockPool& blocks) : config_(config), blocks_(blocks) {
  SLUICE_CHECK(config.max_num_seqs > 0 && config.max_batch_tokens > 0 && config.block_size > 0);
}

void Scheduler::add(SeqId seq_id, std::vector<int32_t> prompt, int32_t priority) {
  SLUICE_CHECK(!prompt.empty());
  Seq s;
  s.id = seq_id;
  s.priority = priority;
  s.arrival = next_arrival_++;
  s.num_prompt = static_cast<int32_t>(prompt.size());
  s.tokens = std::move(prompt);
  const auto [it, inserted] = seqs_.emplace(seq_id, std::move(s));
  SLUICE_CHECK(inserted) << "sequence " << seq_id << " added twice";
  waiting_.emplace(key(it->second), seq_id);
}

int32_t Scheduler::num_output(SeqId seq_id) const {
  const Seq& s = seqs_.at(seq_id);
  return static_cast<int32_t>(s.tokens.size()) - s.num_prompt;
}

ScheduleOutput Scheduler::schedule() {
  ScheduleOutput out;
  int32_t budget = config_.max_batch_tokens;
  schedule_running(out, budget);
  schedule_waiting(out, budget);
  return out;
}

int32_t Scheduler::fitting_tokens(const Seq& s, int32_t want) const {
  const int64_t capacity = (int64_t(s.blocks.size()) + blocks_.num_free()) * config_.block_size - s.num_computed;
  return static_cast<int32_t>(std::clamp<int64_t>(capacity, 0, want));
}

void Scheduler::grow(Seq& s, int32_t num_new) {
  const size_t needed = (s.num_computed + num_new + config_.block_size - 1) / config_.block_size;
  while (s.blocks.size() < needed) s.blocks.push_back(blocks_.allocate());
}

void Scheduler::release_blocks(Seq& s) {
  for (int32_t b : s.blocks) blocks_.unref(b);
  s.blocks.clear();
}

void Scheduler::preempt(Seq& s, ScheduleOutput& out) {
  release_blocks(s);
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

void Scheduler::schedule_waiting(ScheduleOutput& out, int32_t& budget) {
  if (!out.preempted.empty()) return;
  auto it = waiting_.begin();
  while (it != waiting_.end() && budget > 0 && num_running() < config_.max_num_seqs) {
    Seq& s = seqs_.at(it->second);
    const int32_t n = fitting_tokens(s, std::min(static_cast<int32_t>(s.tokens.size()), budget));
    if (n == 0) break;  // FCFS: nobody behind it jumps the queue
    it = waiting_.erase(it);
    running_.emplace(key(s), s.id);
    s.running = true;
    emit(s, n, out, budget);
  }
}

void Scheduler::update(const ScheduleOutput& out, std::span<const SampledToken> sampled) {
  for (const ScheduledSeq& ss : out.seqs) {
    Seq& s = seqs_.at(ss.seq_id);
    SLUICE_CHECK(s.running && s.num_computed == ss.start) << "sequence " << ss.seq_id << " changed within a step";
    s.num_computed += static_cast<int32_t>(ss.token_ids.size());
  }
  for (const SampledToken& t : sampled) {
    Seq& s = seqs_.at(t.seq_id);
    SLUICE_CHECK(s.num_computed == static_cast<int32_t>(s.tokens.size())) << "sequence " << t.seq_id << " sampled early";
    s.tokens.push_back(t.token_id);
  }
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
