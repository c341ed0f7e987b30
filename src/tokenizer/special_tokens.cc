#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace sluice {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) : by_first_byte_(256) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.type(id);
    const bool always = type == TokenType::kUserDefined;
    if (!always && type != TokenType::kControl && type != TokenType::kUnknown) continue;
    const std::string& text = vocab.tokens[id];
    if (text.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(text[0])].push_back({text, id, always});
    has_always_ |= always;
  }
  for (auto& candidates : by_first_byte_) {
    // Longest first; among equal lengths the lower id, so the result is deterministic.
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
      return a.text.size() > b.text.size();
    });
  }
}

std::vector<TextFragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> fragments;
  if (!parse_special && !has_always_) {
    if (!text.empty()) fragments.push_back({text, -1});
    return fragments;
  }
  size_t raw_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const Candidate* hit = nullptr;
    for (const Candidate& c : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if ((parse_special || c.always) && text.substr(pos).starts_with(c.text)) {
        hit = &c;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    if (pos > raw_start) fragments.push_back({text.substr(raw_start, pos - raw_start), -1});
    fragments.push_back({text.substr(pos, hit->text.size()), hit->id});
    pos += hit->text.size();
    raw_start = pos;
  }
  if (raw_start < text.size()) fragments.push_back({text.substr(raw_start), -1});
  return fragments;
}

}  // namespace sluice
