#include "tokenizer/spm.h"

#include <algorithm>
#include <queue>

#include "common/utf8.h"

namespace sluice {
namespace {

// A symbol is a run of the escaped text; merged-away symbols have n == 0.
struct Symbol {
  int32_t prev;
  int32_t next;
  size_t start;
  size_t n;
};

struct Bigram {
  int32_t left;
  int32_t right;
  float score;
  size_t size;  // bytes of the merged text, to detect stale entries
};

struct BigramOrder {
  // std::priority_queue pops the greatest element: the highest score, then the leftmost.
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

std::string spm_escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpmSpace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

SpmModel::SpmModel(const Vocab& vocab) : vocab_(vocab) {
  for (int b = 0; b < 256; ++b) {
    int32_t id = vocab.find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = vocab.unk_id;
    byte_tokens_[b] = id;
  }
}

void SpmModel::encode(std::string_view raw_text, std::vector<int32_t>& out) const {
  const std::string text = spm_escape_spaces(raw_text);
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min<size_t>(utf8_decode(std::string_view(text).substr(pos)).length, text.size() - pos);
    const auto idx = static_cast<int32_t>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, pos, len});
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = symbols[left].n + symbols[right].n;
    const int32_t id = vocab_.find(std::string_view(text).substr(symbols[left].start, size));
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[id], size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = std::string_view(text).substr(symbols[i].start, symbols[i].n);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out.push_back(byte_id);
    }
  }
}

}  // namespace sluice
