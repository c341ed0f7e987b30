// StreamDecoder: turns token ids, pushed one at a time, into text that is always valid UTF-8.
//
// A token may end in the middle of a multi-byte character (byte tokens "<0xE2>", or a BPE
// token holding half an emoji). push() returns everything up to the last complete character
// and holds back a trailing incomplete sequence (at most 3 bytes) until later tokens complete
// it. Bytes that can never become valid UTF-8 (random-weight models produce them) come out as
// U+FFFD at once; flush() turns whatever is still held back into one U+FFFD. The
// concatenation of all push() results and flush() equals Tokenizer::decode() of the same ids
// for a stream that starts at the beginning of a sequence (see below).
//
// Leading space (SPM): decode() drops the space in front of the first text token, because
// encoding put it there. A StreamDecoder does the same only when its stream begins with BOS,
// or when constructed with at_sequence_start = true; otherwise the first token keeps its
// space, since generated tokens usually continue a prompt ("Hello" -> " world").
//
// Not thread-safe: one decoder per stream. The Tokenizer must outlive the decoder.
#pragma once

#include <cstdint>
#include <string>

namespace sluice {

class Tokenizer;

class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool at_sequence_start = false,
                         bool render_special = false);

  // Text completed by token `id`; "" when it only added to an incomplete character.
  std::string push(int32_t id);
  // End of stream: any held-back bytes as U+FFFD. The decoder can be reused afterwards.
  std::string flush();

  // Bytes currently held back (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }
  // Bytes at the start of the last push()'s text that earlier tokens own: held-back bytes
  // that the pushed token showed to be invalid, come out as U+FFFD in front of its own text
  // (0 or 3). A character that the pushed token completes belongs to the token that began it
  // too, but its bytes cannot be split, so it counts as the pushed token's (0 here).
  size_t num_carried_bytes() const { return carried_; }

 private:
  const Tokenizer& tok_;
  bool at_sequence_start_;
  bool render_special_;
  int64_t num_pushed_ = 0;
  bool started_with_bos_ = false;
  std::string pending_;
  size_t carried_ = 0;
};

}  // namespace sluice
