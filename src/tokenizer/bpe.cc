#include "tokenizer/bpe.h"

#include <queue>

#include "common/utf8.h"
#include "tokenizer/byte_level.h"

namespace sluice {
namespace {

struct Symbol {
  int32_t id;  // -1 for a byte the vocabulary lacks; such a symbol never merges
  int32_t prev;
  int32_t next;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;   // ids at queue time, to detect stale entries
  int32_t right_id;
  int32_t result_id;
};

struct CandidateOrder {
  // std::priority_queue pops the greatest element: the lowest rank, then the leftmost.
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

Result<BpeModel> BpeModel::create(const Vocab& vocab, std::span<const std::string_view> merges,
                                  bool ignore_merges) {
  BpeModel model(vocab);
  model.ignore_merges_ = ignore_merges;
  for (int b = 0; b < 256; ++b) {
    model.byte_tokens_[b] = vocab.find(utf8_encode(byte_to_unicode(static_cast<uint8_t>(b))));
  }
  model.merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    // NOTE: search from index 1, so that a left part that is itself " " still splits right.
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) {
      return Error("tokenizer.ggml.merges: merge {} ('{}') is not two tokens separated by a space",
                   rank, merge);
    }
    const std::string_view left = merge.substr(0, space);
    const std::string_view right = merge.substr(space + 1);
    joined.assign(left);
    joined.append(right);
    const int32_t left_id = vocab.find(left);
    const int32_t right_id = vocab.find(right);
    const int32_t result_id = vocab.find(joined);
    if (left_id < 0 || right_id < 0 || result_id < 0) continue;
    // The first (lowest-rank) occurrence of a pair wins, as in a rank lookup table.
    model.merges_.try_emplace(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), result_id});
  }
  return model;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = vocab_->find(bytes_to_byte_level(word));
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    else if (vocab_->unk_id >= 0) out.push_back(vocab_->unk_id);
    return;
  }

  const auto n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_tokens_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Merge* merge = find_merge(symbols[left].id, symbols[right].id);
    if (!merge) return;
    queue.push({merge->rank, left, right, symbols[left].id, symbols[right].id, merge->result_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i, i + 1);

  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.left] || !alive[c.right] || symbols[c.left].next != c.right ||
        symbols[c.left].id != c.left_id || symbols[c.right].id != c.right_id) {
      continue;
    }
    Symbol& left = symbols[c.left];
    left.id = c.result_id;
    left.next = symbols[c.right].next;
    if (left.next >= 0) symbols[left.next].prev = c.left;
    alive[c.right] = false;
    try_add(left.prev, c.left);
    try_add(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) out.push_back(symbols[i].id);
    else if (vocab_->unk_id >= 0) out.push_back(vocab_->unk_id);
  }
}

}  // namespace sluice
