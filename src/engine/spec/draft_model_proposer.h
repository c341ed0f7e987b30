// A draft model (--draft-model): a smaller model, or a lower-bit copy of the target's own
// weights, proposes the drafts.
//
// It must share the target's tokenizer (check_draft_vocabulary). It runs on the engine thread
// with its own paged KV cache, and its steps are batched across every sequence it drafts for:
// one forward pass brings each sequence's draft KV up to date (the tokens accepted or sampled
// since, a new sequence's prompt: in chunks of at most max_batch_tokens), then one forward pass
// per draft position for all of them. What the target rejected is rolled back: the draft cache
// keeps, per sequence, the longest prefix its tokens share with the sequence's, and releases the
// blocks past it. A sequence whose draft KV does not fit the draft cache's free blocks (after
// taking those of sequences not drafting now, least recently used first), or would pass the
// draft's context (its blocks are then freed: it never drafts again), gets no drafts this
// step. Catching up is bounded to max_batch_tokens tokens a step: a sequence with a long new
// prompt gets its drafts a few steps later rather than stalling everyone's step.
//
// Drafts are picked by a copy of the target's own sampler for the sequence (its penalties, its
// min_tokens suppression and its random state), fed the draft's logits and then its own drafts:
// a greedy request drafts the draft's argmax under the target's penalties, a sampled one draws
// each draft with the very uniform number the target will draw with at that position (common
// random numbers). Where the two distributions are alike, one u falls on one token in both, so
// sampled drafts agree about as often as Leviathan et al.'s rule would accept them (sum min(p, q);
// `sluice pair` reports both) without sending q to the verifier. Verification is unchanged
// (runner.cc: the target samples as without speculation and a draft survives while they agree),
// so outputs stay bit-identical, seeded or not, whatever the draft length.
#pragma once

#include <memory>
#include <unordered_map>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/spec/proposer.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice::spec {

// Ok when a draft with vocabulary `draft` can propose for a target with `target`: the same kind
// and pre-tokenizer, the same BOS and EOS ids, the same text for every id both have, and the ids
// only one of them has are padding (unused tokens). Otherwise the first difference, e.g.
// "token 17 differs: 'ab' in the target, 'ac' in the draft".
Status check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft);

class DraftModelProposer : public Proposer {
 public:
  // kv_bytes: the draft's KV cache; refused if it holds no block.
  static Result<std::unique_ptr<DraftModelProposer>> create(Model& draft, int32_t target_vocab, ThreadPool& pool,
                                                            int64_t kv_bytes, int32_t block_size,
                                                            int32_t max_batch_tokens, KvType kv_type);

  std::string_view name() const override { return "draft_model"; }
  bool costly() const override { return true; }
  int32_t last_passes() const override { return passes_; }
  void remove_sequence(SeqId seq_id) override;
  void propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) override;

  int32_t num_blocks() const { return kv_->num_blocks(); }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size()); }
  size_t kv_bytes() const { return kv_->bytes(); }

 private:
  DraftModelProposer(Model& draft, int32_t target_vocab, ThreadPool& pool, int32_t num_blocks, int32_t block_size,
                     int32_t max_batch_tokens, KvType kv_type);
  struct Seq {
    std::vector<int32_t> computed;  // tokens whose keys and values are in the draft cache
    std::vector<int32_t> blocks;
    int64_t last_used = 0;          // the propose() call that last drafted for it
  };
  // Frees the blocks of sequences not drafting in this call, least recently used first, until
  // `needed` are free or none is left to take from.
  void reclaim(size_t needed, int64_t call);
  void truncate(Seq& s, size_t num_tokens);
  int32_t argmax(std::span<const float> logits) const;

  Model& draft_;
  int32_t vocab_;  // drafts are ids below the target's and the draft's vocabulary sizes
  ThreadPool& pool_;
  int32_t block_size_, max_batch_tokens_;
  std::unique_ptr<KvPool> kv_;
  std::vector<int32_t> free_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<float> logits_;
  int64_t calls_ = 0;
  int32_t passes_ = 0;
};

}  // namespace sluice::spec
