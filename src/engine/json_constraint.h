// JSON mode (OpenAI's `response_format: {"type": "json_object"}`): the sampler may draw only
// tokens whose text keeps the output a prefix of a JSON object, and the engine ends the output
// (finish reason "stop") once the object is complete. The output is then always a JSON object
// (RFC 8259), or a prefix of one if max_tokens or a stop string cut it first.
//
// Three pieces:
//   JsonState      a pushdown recognizer of JSON, one byte at a time, in a few bytes of plain
//                  state (the open containers are a 64-bit stack of object/array bits), so that
//                  trying a token is a copy and a loop over its bytes;
//   JsonVocabulary every token's text, and the masks already computed, keyed by the exact
//                  state (a mask depends on the whole state: "}]}" pops three levels); shared by
//                  all requests on one model, thread-safe, bounded;
//   JsonConstraint one request's state: the mask of the tokens allowed now, advanced by each
//                  accepted token. A value type (a draft model's copy of a sampler copies it).
//
// The language accepted is a subset of JSON, every output valid everywhere:
//   - the top-level value is an object (json_object);
//   - at most kMaxDepth nested containers;
//   - whitespace between tokens is what a pretty-printer writes: a run holds at most one line
//     break (CR LF or LF) and at most 4 * depth + 1 spaces or tabs on each side of it (depth:
//     open containers; at most kMaxSpaces). A model that keeps emitting blank lines or spaces,
//     the known failure of JSON modes, is steered back to content;
//   - strings hold well-formed UTF-8 (no overlong forms, no surrogates) and no \u escape of a
//     surrogate (D800-DFFF), so that no parser meets a lone surrogate; other characters can be
//     written as themselves;
//   - after the closing brace only whitespace (a token "}\n" is allowed; the engine stops there).
// Tokens without text (control tokens, end of generation) are never allowed: the engine ends a
// JSON output itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace sluice {

class JsonState {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxSpaces = 64;

  // Consumes one byte; false if it cannot continue a JSON object here (the state is then
  // unspecified: callers try bytes on a copy).
  bool feed(uint8_t byte);
  // Every byte of `text`, in order.
  bool feed(std::string_view text);
  // The object is closed (only whitespace may follow).
  bool done() const { return mode_ == kDone; }

  bool operator==(const JsonState&) const = default;
  uint64_t hash() const;

 private:
  enum Mode : uint8_t {
    kStart, kValue, kArrayFirst, kObjectFirst, kKey, kColon, kAfterValue, kDone,
    kString, kEscape, kUnicode, kUtf8, kLiteral,
    kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExpMark, kNumExpSign, kNumExp,
  };
  bool push(bool object);
  void close_value();       // a value ended: kAfterValue, or kDone at depth 0
  bool top_is_object() const { return (stack_ >> (depth_ - 1)) & 1; }
  bool value_start(uint8_t byte);
  bool number(uint8_t byte);

  uint64_t stack_ = 0;      // bit d: the container at depth d + 1 is an object (1) or an array (0)
  uint8_t depth_ = 0;
  Mode mode_ = kStart;
  uint8_t aux_ = 0;         // kLiteral: literal * 8 + position; kUnicode: digits left + 8 if
                            // a surrogate is being started; kUtf8: bytes left + 4 * first-byte range
  uint8_t spaces_ = 0;      // spaces and tabs in the current whitespace run since its line break
  uint8_t breaks_ = 0;      // the run's line break: 0 none, 1 CR, 2 LF
  bool key_ = false;        // the string being read is an object key
};

// One bit per token id: 1 = allowed.
using TokenMask = std::vector<uint64_t>;
inline bool mask_allows(const TokenMask& m, int32_t id) { return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }

class JsonVocabulary {
 public:
  // pieces[id]: the text token id adds to the output ("" for tokens that add none).
  explicit JsonVocabulary(std::vector<std::string> pieces);

  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // The tokens whose text can follow `state`; computed once per distinct state (at most
  // kMaxMasks kept; the memo is emptied when full).
  std::shared_ptr<const TokenMask> mask(const JsonState& state);

  static constexpr size_t kMaxMasks = 256;

 private:
  struct Hash {
    size_t operator()(const JsonState& s) const { return s.hash(); }
  };
  const std::vector<std::string> pieces_;
  Mutex mu_;
  std::unordered_map<JsonState, std::shared_ptr<const TokenMask>, Hash> masks_ SLUICE_GUARDED_BY(mu_);
};

class JsonConstraint {
 public:
  explicit JsonConstraint(std::shared_ptr<JsonVocabulary> vocab) : vocab_(std::move(vocab)) {}

  std::shared_ptr<const TokenMask> allowed() const;
  // Advances by the token's text. A token the mask did not allow (only when every token was
  // masked and the sampler fell back) leaves the state broken: nothing is allowed after it.
  void accept(int32_t token_id);
  bool done() const { return state_.done(); }

 private:
  std::shared_ptr<JsonVocabulary> vocab_;
  JsonState state_;
  bool broken_ = false;
};

}  // namespace sluice
