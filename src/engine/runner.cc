#include "engine/runner.h"

#include <algorithm>

#include "common/check.h"

namespace sluice {

Runner::Runner(Model& model, KvPool& kv, ThreadPool& pool) : model_(model), kv_(kv), pool_(pool) {}

void Runner::add_sequence(SeqId seq_id, const SamplingParams& params, std::span<const int32_t> prompt,
                          std::vector<int32_t> suppressed, int32_t suppress_until) {
  auto [it, inserted] = samplers_.try_emplace(seq_id, params, prompt);
  SLUICE_CHECK(inserted) << "sequence " << seq_id << " added twice";
  if (suppress_until > 0) it->second.suppress_until(std::move(suppressed), suppress_until);
}

void Runner::remove_sequence(SeqId seq_id) { samplers_.erase(seq_id); }

Result<RunnerOutput> Runner::run(const ScheduleOutput& out) {
  ForwardBatch& b = batch_;
  b = ForwardBatch{};
  b.block_size = kv_.block_size();
  for (const ScheduledSeq& s : out.seqs) {
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.block_table.size()));
  }
  std::vector<Sampler*> samplers;
  RunnerOutput result;
  for (const ScheduledSeq& s : out.seqs) {
    const int32_t row = b.add_sequence(s.block_table);
    const auto n = static_cast<int32_t>(s.token_ids.size());
    for (int32_t i = 0; i < n; ++i) b.add_token(row, s.token_ids[i], s.start + i, s.sample && i == n - 1);
    if (s.sample) {
      auto it = samplers_.find(s.seq_id);
      SLUICE_CHECK(it != samplers_.end()) << "sequence " << s.seq_id << " has no sampler";
      samplers.push_back(&it->second);
      result.sampled.push_back({s.seq_id, 0});
    }
  }
  if (Status st = model_.forward(b, kv_, pool_, logits_); !st) return Error(st);
  const int64_t vocab = model_.config().vocab_size;
  result.samples.resize(samplers.size());
  pool_.parallel_for(static_cast<int64_t>(samplers.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      result.samples[i] = samplers[i]->sample(std::span<const float>(logits_).subspan(i * vocab, vocab));
      samplers[i]->accept(result.samples[i].token_id);
    }
  });
  for (size_t i = 0; i < samplers.size(); ++i) result.sampled[i].token_id = result.samples[i].token_id;
  return result;
}

}  // namespace sluice
