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

void Runner::constrain(SeqId seq_id, JsonConstraint constraint) {
  auto it = samplers_.find(seq_id);
  SLUICE_CHECK(it != samplers_.end()) << "sequence " << seq_id << " has no sampler";
  it->second.constrain(std::move(constraint));
}

void Runner::remove_sequence(SeqId seq_id) { samplers_.erase(seq_id); }

const Sampler* Runner::sampler(SeqId seq_id) const {
  auto it = samplers_.find(seq_id);
  return it == samplers_.end() ? nullptr : &it->second;
}

Result<RunnerOutput> Runner::run(const ScheduleOutput& out) {
  ForwardBatch& b = batch_;
  b = ForwardBatch{};
  b.block_size = kv_.block_size();
  for (const ScheduledSeq& s : out.seqs) {
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, static_cast<int32_t>(s.block_table.size()));
  }
  // Per sampled sequence: its sampler, its drafts and its first row of logits.
  struct Verify {
    SeqId seq_id;
    Sampler* sampler;
    std::span<const int32_t> draft;
    int64_t first_row;
    std::vector<SampleResult> samples;
  };
  std::vector<Verify> verify;
  RunnerOutput result;
  std::vector<int64_t> score_rows;  // [prompt scores] the row of each
  std::vector<int32_t> score_top;   // [prompt scores] its top_logprobs
  int64_t num_rows = 0;
  for (const ScheduledSeq& s : out.seqs) {
    const int32_t row = b.add_sequence(s.block_table);
    const auto n = static_cast<int32_t>(s.token_ids.size());
    SLUICE_CHECK(s.num_draft == 0 || (s.sample && s.num_draft < n)) << "sequence " << s.seq_id << ": bad drafts";
    // Logits at the last known token and at every draft token; before them, at the prompt
    // tokens that score the next one (never the same rows: a scored token has a prompt token
    // after it, so it is not the last known one).
    const int32_t first_logits = n - 1 - s.num_draft;
    const auto num_scored = static_cast<int32_t>(s.score_targets.size());
    SLUICE_CHECK(num_scored <= n && (!s.sample || num_scored <= first_logits))
        << "sequence " << s.seq_id << ": bad prompt scores";
    for (int32_t i = 0; i < n; ++i) {
      b.add_token(row, s.token_ids[i], s.start + i, i < num_scored || (s.sample && i >= first_logits));
    }
    if (num_scored > 0) {
      const int32_t top = samplers_.contains(s.seq_id) ? samplers_.at(s.seq_id).params().top_logprobs : 0;
      for (int32_t i = 0; i < num_scored; ++i) {
        result.prompt.push_back({s.seq_id, s.start + i + 1, {s.score_targets[i], 0, {}}});
        score_rows.push_back(num_rows++);
        score_top.push_back(top);
      }
    }
    if (s.sample) {
      auto it = samplers_.find(s.seq_id);
      SLUICE_CHECK(it != samplers_.end()) << "sequence " << s.seq_id << " has no sampler";
      verify.push_back({s.seq_id, &it->second, std::span(s.token_ids).subspan(n - s.num_draft), num_rows, {}});
      num_rows += s.num_draft + 1;
    }
  }
  if (Status st = model_.forward(b, kv_, pool_, logits_); !st) return Error(st);
  const int64_t vocab = model_.config().vocab_size;
  // Verification (speculative sampling, Leviathan et al. 2023, Chen et al. 2023, with a draft
  // that is one token rather than a distribution, q = 1 at the drafted token): at each position
  // the target's token is sampled as without speculation, from the same logits (batch
  // invariance), penalty state and generator draw; the draft survives while they agree. This is
  // the rejection rule for q = 1: the draft x is accepted with probability p(x), and a rejection
  // leaves a token drawn from p without x, renormalized = norm(max(0, p - q)). The tokens kept
  // never depend on the drafts, only how many come per step, so greedy and sampled outputs, seeded
  // or not, are bit-identical to decoding without speculation, whatever a proposer knew (a draft
  // model drafts with a copy of this sampler, so its sampled drafts are likely, not certain, to
  // agree: draft_model_proposer.h).
  pool_.parallel_for(static_cast<int64_t>(verify.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Verify& v = verify[i];
      for (size_t j = 0; j <= v.draft.size(); ++j) {
        const auto row = static_cast<size_t>(v.first_row) + j;
        SampleResult r = v.sampler->sample(std::span<const float>(logits_).subspan(row * vocab, vocab));
        v.sampler->accept(r.token_id);
        v.samples.push_back(std::move(r));
        if (j == v.draft.size() || v.samples.back().token_id != v.draft[j]) break;
      }
    }
  });
  // Prompt scores, each row on its own (a TokenScorer per chunk of rows).
  pool_.parallel_for(static_cast<int64_t>(result.prompt.size()), [&](int64_t begin, int64_t end) {
    TokenScorer scorer;
    for (int64_t i = begin; i < end; ++i) {
      const auto row = static_cast<size_t>(score_rows[i]);
      PromptScore& p = result.prompt[i];
      p.score = scorer.score(std::span<const float>(logits_).subspan(row * vocab, vocab), p.score.token_id, score_top[i]);
    }
  });
  for (Verify& v : verify) {
    for (SampleResult& r : v.samples) {
      result.sampled.push_back({v.seq_id, r.token_id});
      result.samples.push_back(std::move(r));
    }
  }
  return result;
}

}  // namespace sluice
