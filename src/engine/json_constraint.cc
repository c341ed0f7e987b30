// JSON recognizer and token masks. Grammar: RFC 8259 (value, object, array, string, number,
// literals), restricted as json_constraint.h says; UTF-8 well-formedness: RFC 3629, section 4.
#include "engine/json_constraint.h"

#include <algorithm>

namespace sluice {
namespace {

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// The range of the first continuation byte after a lead byte (RFC 3629's table): 0 is
// 80..BF, 1 is A0..BF (after E0), 2 is 80..9F (after ED: no surrogates), 3 is 90..BF (after
// F0), 4 is 80..8F (after F4: nothing past U+10FFFF).
bool in_first_range(uint8_t b, int range) {
  switch (range) {
    case 1: return b >= 0xA0 && b <= 0xBF;
    case 2: return b >= 0x80 && b <= 0x9F;
    case 3: return b >= 0x90 && b <= 0xBF;
    case 4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

}  // namespace

uint64_t JsonState::hash() const {
  uint64_t h = stack_ * 0x9e3779b97f4a7c15ULL;
  const uint64_t small = uint64_t{depth_} | uint64_t{mode_} << 8 | uint64_t{aux_} << 16 | uint64_t{spaces_} << 24 |
                         uint64_t{breaks_} << 32 | uint64_t{key_} << 40;
  h ^= small + 0x7f4a7c159e3779b9ULL + (h << 6) + (h >> 2);
  return h;
}

bool JsonState::push(bool object) {
  if (depth_ == kMaxDepth) return false;
  const uint64_t bit = uint64_t{1} << depth_;
  stack_ = object ? stack_ | bit : stack_ & ~bit;
  ++depth_;
  mode_ = object ? kObjectFirst : kArrayFirst;
  return true;
}

void JsonState::close_value() { mode_ = depth_ == 0 ? kDone : kAfterValue; }

bool JsonState::value_start(uint8_t b) {
  switch (b) {
    case '{': return push(true);
    case '[': return push(false);
    case '"': mode_ = kString, key_ = false; return true;
    case '-': mode_ = kNumMinus; return true;
    case '0': mode_ = kNumZero; return true;
    case 't': mode_ = kLiteral, aux_ = 0 * 8 + 1; return true;
    case 'f': mode_ = kLiteral, aux_ = 1 * 8 + 1; return true;
    case 'n': mode_ = kLiteral, aux_ = 2 * 8 + 1; return true;
    default:
      if (b >= '1' && b <= '9') {
        mode_ = kNumInt;
        return true;
      }
      return false;
  }
}

// A byte in one of the number modes. A byte that cannot extend a complete number ends it
// and is read again after the value.
bool JsonState::number(uint8_t b) {
  switch (mode_) {
    case kNumMinus:
      if (b == '0') return mode_ = kNumZero, true;
      if (is_digit(b)) return mode_ = kNumInt, true;
      return false;
    case kNumDot:
      return is_digit(b) ? (mode_ = kNumFrac, true) : false;
    case kNumExpMark:
      if (b == '+' || b == '-') return mode_ = kNumExpSign, true;
      return is_digit(b) ? (mode_ = kNumExp, true) : false;
    case kNumExpSign:
      return is_digit(b) ? (mode_ = kNumExp, true) : false;
    case kNumInt:
      if (is_digit(b)) return true;
      [[fallthrough]];
    case kNumZero:
      if (b == '.') return mode_ = kNumDot, true;
      [[fallthrough]];
    case kNumFrac:
      if (mode_ == kNumFrac && is_digit(b)) return true;
      if (b == 'e' || b == 'E') return mode_ = kNumExpMark, true;
      [[fallthrough]];
    case kNumExp:
      if (mode_ == kNumExp && is_digit(b)) return true;
      close_value();
      return feed(b);
    default:
      return false;
  }
}

bool JsonState::feed(uint8_t b) {
  switch (mode_) {
    case kString:
      if (b == '"') {
        if (key_) {
          mode_ = kColon;
        } else {
          close_value();
        }
        return true;
      }
      if (b == '\\') return mode_ = kEscape, true;
      if (b < 0x20) return false;
      if (b < 0x80) return true;
      if (b >= 0xC2 && b <= 0xDF) return mode_ = kUtf8, aux_ = 1, true;
      if (b >= 0xE0 && b <= 0xEF) return mode_ = kUtf8, aux_ = 2 + 4 * (b == 0xE0 ? 1 : b == 0xED ? 2 : 0), true;
      if (b >= 0xF0 && b <= 0xF4) return mode_ = kUtf8, aux_ = 3 + 4 * (b == 0xF0 ? 3 : b == 0xF4 ? 4 : 0), true;
      return false;
    case kUtf8:
      if (!in_first_range(b, aux_ >> 2)) return false;
      aux_ = static_cast<uint8_t>((aux_ & 3) - 1);  // later bytes: any continuation byte
      if (aux_ == 0) mode_ = kString;
      return true;
    case kEscape:
      if (b == 'u') return mode_ = kUnicode, aux_ = 4, true;
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
        return mode_ = kString, true;
      }
      return false;
    case kUnicode: {
      if (!is_hex(b)) return false;
      const int left = aux_ & 7;
      if (left == 4 && (b == 'd' || b == 'D')) return aux_ = 3 + 8, true;
      if (left == 3 && (aux_ & 8) && !(b >= '0' && b <= '7')) return false;  // D800..DFFF
      aux_ = static_cast<uint8_t>(left - 1);
      if (aux_ == 0) mode_ = kString;
      return true;
    }
    case kLiteral: {
      const std::string_view lit = kLiterals[aux_ >> 3];
      const size_t pos = aux_ & 7;
      if (b != static_cast<uint8_t>(lit[pos])) return false;
      if (pos + 1 == lit.size()) {
        close_value();
      } else {
        ++aux_;
      }
      return true;
    }
    case kNumMinus: case kNumZero: case kNumInt: case kNumDot: case kNumFrac:
    case kNumExpMark: case kNumExpSign: case kNumExp:
      return number(b);
    default:
      break;
  }
  // Between tokens of the grammar.
  if (b == '\n' || b == '\r') {
    if (breaks_ == 2 || (b == '\r' && breaks_ == 1)) return false;
    breaks_ = b == '\n' ? 2 : 1;
    spaces_ = 0;
    return true;
  }
  if (breaks_ == 1) return false;  // CR only before LF
  if (b == ' ' || b == '\t') {
    if (spaces_ >= std::min(4 * depth_ + 1, kMaxSpaces)) return false;
    ++spaces_;
    return true;
  }
  spaces_ = 0, breaks_ = 0;
  switch (mode_) {
    case kStart: return b == '{' && push(true);
    case kValue: return value_start(b);
    case kArrayFirst: return b == ']' ? (--depth_, close_value(), true) : value_start(b);
    case kObjectFirst:
      if (b == '}') return --depth_, close_value(), true;
      [[fallthrough]];
    case kKey:
      return b == '"' ? (mode_ = kString, key_ = true, true) : false;
    case kColon: return b == ':' ? (mode_ = kValue, true) : false;
    case kAfterValue:
      if (b == ',') return mode_ = top_is_object() ? kKey : kValue, true;
      if (b == (top_is_object() ? '}' : ']')) return --depth_, close_value(), true;
      return false;
    default:  // kDone: only whitespace
      return false;
  }
}

bool JsonState::feed(std::string_view text) {
  for (char c : text) {
    if (!feed(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

JsonVocabulary::JsonVocabulary(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}

std::shared_ptr<const TokenMask> JsonVocabulary::mask(const JsonState& state) {
  {
    MutexLock lock(mu_);
    if (auto it = masks_.find(state); it != masks_.end()) return it->second;
  }
  // Computed outside the lock (two threads may compute one mask; both get the same bits).
  auto mask = std::make_shared<TokenMask>((pieces_.size() + 63) / 64, 0);
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (pieces_[id].empty()) continue;
    JsonState s = state;
    if (s.feed(pieces_[id])) (*mask)[id >> 6] |= uint64_t{1} << (id & 63);
  }
  MutexLock lock(mu_);
  if (masks_.size() >= kMaxMasks) masks_.clear();
  masks_.emplace(state, mask);
  return mask;
}

void JsonConstraint::accept(int32_t token_id) {
  if (broken_) return;
  if (token_id < 0 || token_id >= vocab_->size() || vocab_->piece(token_id).empty() ||
      !state_.feed(vocab_->piece(token_id))) {
    broken_ = true;
  }
}

std::shared_ptr<const TokenMask> JsonConstraint::allowed() const {
  if (!broken_) return vocab_->mask(state_);
  return std::make_shared<const TokenMask>((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
}

}  // namespace sluice
