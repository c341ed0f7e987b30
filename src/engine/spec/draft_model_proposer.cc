#include "engine/spec/draft_model_proposer.h"

#include <algorithm>
#include <optional>

#include "model/batch.h"

namespace sluice::spec {
namespace {

bool is_padding(const Tokenizer& t, int32_t id) {
  const TokenType type = t.token_type(id);
  const std::string& text = t.token_text(id);
  return type == TokenType::kUnused || text.starts_with("[PAD") || text.starts_with("<pad") ||
         text.starts_with("<|PAD");
}

std::string shown(std::string_view s) { return fmt::format("'{}{}'", s.substr(0, 40), s.size() > 40 ? "..." : ""); }

}  // namespace

Status check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  auto differ = [](std::string what) { return Status::error(std::move(what), StatusCode::kInvalid); };
  if (target.kind() != draft.kind()) {
    return differ(fmt::format("the vocabularies differ in kind: {} in the target, {} in the draft", target.kind(),
                              draft.kind()));
  }
  if (target.pre() != draft.pre()) {
    return differ(fmt::format("the pre-tokenizers differ: '{}' in the target, '{}' in the draft", target.pre(),
                              draft.pre()));
  }
  if (target.bos_id() != draft.bos_id() || target.eos_id() != draft.eos_id()) {
    return differ(fmt::format("the special ids differ: BOS {} and EOS {} in the target, BOS {} and EOS {} in the draft",
                              target.bos_id(), target.eos_id(), draft.bos_id(), draft.eos_id()));
  }
  const int32_t common = std::min(target.vocab_size(), draft.vocab_size());
  for (int32_t id = 0; id < common; ++id) {
    if (target.token_text(id) != draft.token_text(id)) {
      return differ(fmt::format("token {} differs: {} in the target, {} in the draft", id,
                                shown(target.token_text(id)), shown(draft.token_text(id))));
    }
  }
  const Tokenizer& longer = target.vocab_size() > draft.vocab_size() ? target : draft;
  for (int32_t id = common; id < longer.vocab_size(); ++id) {
    if (!is_padding(longer, id)) {
      return differ(fmt::format("the vocabularies differ in size ({} in the target, {} in the draft) by more than "
                                "padding: token {} is {} in the {} only",
                                target.vocab_size(), draft.vocab_size(), id, shown(longer.token_text(id)),
                                &longer == &target ? "target" : "draft"));
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(Model& draft, int32_t target_vocab,
                                                                       ThreadPool& pool, int64_t kv_bytes,
                                                                       int32_t block_size, int32_t max_batch_tokens,
                                                                       KvType kv_type) {
  const int64_t block_bytes = static_cast<int64_t>(KvPool::bytes_per_token(draft.config(), kv_type)) * block_size;
  const int64_t num_blocks = kv_bytes / block_bytes;
  if (num_blocks < 1) {
    return Error(StatusCode::kInvalid, "a draft KV cache of {} bytes holds no block: one block of {} tokens takes {} bytes",
                 kv_bytes, block_size, block_bytes);
  }
  if (num_blocks > INT32_MAX / block_size) return Error(StatusCode::kInvalid, "a draft KV cache of {} blocks is too large", num_blocks);
  return std::unique_ptr<DraftModelProposer>(new DraftModelProposer(
      draft, target_vocab, pool, static_cast<int32_t>(num_blocks), block_size, max_batch_tokens, kv_type));
}

DraftModelProposer::DraftModelProposer(Model& draft, int32_t target_vocab, ThreadPool& pool, int32_t num_blocks,
                                       int32_t block_size, int32_t max_batch_tokens, KvType kv_type)
    : draft_(draft),
      vocab_(std::min(target_vocab, draft.config().vocab_size)),
      pool_(pool),
      block_size_(block_size),
      max_batch_tokens_(std::max(1, max_batch_tokens)),
      kv_(std::make_unique<KvPool>(draft.config(), num_blocks, block_size, kv_type)) {
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void DraftModelProposer::truncate(Seq& s, size_t num_tokens) {
  s.computed.resize(std::min(s.computed.size(), num_tokens));
  const size_t needed = (s.computed.size() + block_size_ - 1) / block_size_;
  while (s.blocks.size() > needed) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

void DraftModelProposer::reclaim(size_t needed, int64_t call) {
  while (free_.size() < needed) {
    Seq* oldest = nullptr;
    for (auto& [id, s] : seqs_) {
      if (s.last_used < call && !s.blocks.empty() && (!oldest || s.last_used < oldest->last_used)) oldest = &s;
    }
    if (!oldest) return;
    truncate(*oldest, 0);
  }
}

void DraftModelProposer::remove_sequence(SeqId seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  truncate(it->second, 0);
  seqs_.erase(it);
}

int32_t DraftModelProposer::argmax(std::span<const float> logits) const {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;  // NaN never wins; ties: the lowest id
  }
  return best;
}

void DraftModelProposer::propose(std::span<const DraftQuery> queries, std::vector<std::vector<int32_t>>& out) {
  out.assign(queries.size(), {});
  passes_ = 0;
  const int64_t call = ++calls_;
  for (const DraftQuery& q : queries) seqs_[q.seq_id].last_used = call;
  const int32_t context = draft_.config().context_length;
  // Who drafts this step: the rest of its tokens and k - 1 drafts must fit the context and the
  // cache (after rolling back to what it shares with the sequence).
  struct Job {
    size_t query;
    Seq* seq;
    std::span<const int32_t> tokens;
    int32_t k;
    std::optional<Sampler> sampler;  // a copy of the target's, fed the drafts as it would be
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < queries.size(); ++i) {
    const DraftQuery& q = queries[i];
    Seq& s = seqs_[q.seq_id];
    const auto same = std::mismatch(s.computed.begin(), s.computed.end(), q.tokens.begin(), q.tokens.end()).first;
    truncate(s, std::min<size_t>(same - s.computed.begin(), q.tokens.size() - 1));
    const int64_t last = static_cast<int64_t>(q.tokens.size()) + q.max_tokens - 1;  // positions to hold
    if (static_cast<int64_t>(q.tokens.size()) >= context) {
      truncate(s, 0);  // past the draft's context for good
      continue;
    }
    if (q.max_tokens < 1 || last > context) continue;
    // An id the draft does not have (the target's padding): no drafts for it.
    if (std::any_of(q.tokens.begin() + static_cast<int64_t>(s.computed.size()), q.tokens.end(),
                    [&](int32_t t) { return t >= draft_.config().vocab_size; })) {
      continue;
    }
    const int64_t blocks = (last + block_size_ - 1) / block_size_ - static_cast<int64_t>(s.blocks.size());
    if (blocks > static_cast<int64_t>(free_.size())) reclaim(static_cast<size_t>(blocks), call);
    if (blocks > static_cast<int64_t>(free_.size())) continue;
    for (int64_t b = 0; b < blocks; ++b) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    jobs.push_back({i, &s, q.tokens, q.max_tokens, {}});
    if (q.sampler) jobs.back().sampler.emplace(*q.sampler);
  }
  if (jobs.empty()) return;
  size_t max_blocks = 0;
  for (const Job& j : jobs) max_blocks = std::max(max_blocks, j.seq->blocks.size());
  auto new_batch = [&] {
    ForwardBatch b;
    b.block_size = block_size_;
    b.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
    return b;
  };
  // The ids and slots were checked above, so the draft's forward pass should not fail; if it
  // does, this step has no drafts and the draft cache forgets these sequences.
  bool failed = false;
  auto run = [&](const ForwardBatch& b) {
    failed = !draft_.forward(b, *kv_, pool_, logits_).is_ok();
    return !failed;
  };
  auto give_up = [&] {
    for (const Job& job : jobs) truncate(*job.seq, 0);
    out.assign(queries.size(), {});
  };
  const int64_t vocab = draft_.config().vocab_size;
  // The draft at row r of the logits for job j, on the thread pool (a sampled pick is a pass
  // over the vocabulary).
  auto draft_all = [&](const std::vector<size_t>& js) {
    pool_.parallel_for(static_cast<int64_t>(js.size()), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        Job& job = jobs[js[r]];
        const std::span<const float> row = std::span<const float>(logits_).subspan(r * vocab, vocab_);
        int32_t token;
        if (job.sampler) {
          token = job.sampler->pick(row);
          job.sampler->accept(token);
        } else {
          token = argmax(row);
        }
        out[job.query].push_back(token);
      }
    });
  };
  // Catch-up: each sequence's tokens not yet in the draft cache, up to its last one, whose
  // logits give the first draft; chunked under the token budget.
  // At most max_batch_tokens tokens of catching up a step, in one pass: a sequence not caught
  // up by then keeps what it computed and drafts in a later step.
  std::vector<bool> caught_up(jobs.size(), false);
  {
    ForwardBatch b = new_batch();
    std::vector<size_t> finishing;
    int32_t budget = max_batch_tokens_;
    for (size_t j = 0; j < jobs.size(); ++j) {
      Job& job = jobs[j];
      const auto done = static_cast<int64_t>(job.seq->computed.size());
      const int64_t left = static_cast<int64_t>(job.tokens.size()) - done;
      const int64_t n = std::min<int64_t>(left, budget);
      if (n <= 0) continue;
      const int32_t row = b.add_sequence(job.seq->blocks);
      for (int64_t p = done; p < done + n; ++p) {
        b.add_token(row, job.tokens[p], static_cast<int32_t>(p), p == static_cast<int64_t>(job.tokens.size()) - 1);
      }
      job.seq->computed.insert(job.seq->computed.end(), job.tokens.begin() + done, job.tokens.begin() + done + n);
      budget -= static_cast<int32_t>(n);
      if (n == left) finishing.push_back(j);
    }
    if (b.num_tokens() > 0) {
      if (!run(b)) return give_up();
      ++passes_;
    }
    draft_all(finishing);
    for (size_t f : finishing) caught_up[f] = true;
  }
  // One pass per further draft position, for every sequence still drafting.
  for (int32_t depth = 1;; ++depth) {
    ForwardBatch b = new_batch();
    std::vector<size_t> active;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (!caught_up[j] || jobs[j].k <= depth) continue;
      Job& job = jobs[j];
      const int32_t token = out[job.query].back();
      const auto pos = static_cast<int32_t>(job.seq->computed.size());
      b.add_token(b.add_sequence(job.seq->blocks), token, pos, true);
      job.seq->computed.push_back(token);
      active.push_back(j);
    }
    if (active.empty()) break;
    if (!run(b)) return give_up();
    ++passes_;
    draft_all(active);
  }
  // Blocks past the positions held (a sequence that drafted fewer) go back.
  for (const Job& job : jobs) truncate(*job.seq, job.seq->computed.size());
}

}  // namespace sluice::spec
