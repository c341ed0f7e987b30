#include "tokenizer/stream_decoder.h"

#include "common/utf8.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool at_sequence_start, bool render_special)
    : tok_(tok), at_sequence_start_(at_sequence_start), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
  std::string piece = tok_.token_to_piece(id, render_special_);
  if (num_pushed_ == 0) started_with_bos_ = id == tok_.bos_id();
  // Same positions as Tokenizer::decode(): the first token, or the one right after BOS.
  const bool at_start = (num_pushed_ == 0 && at_sequence_start_) || (num_pushed_ == 1 && started_with_bos_);
  if (at_start && tok_.strips_leading_space() && piece.starts_with(' ')) piece.erase(0, 1);
  ++num_pushed_;

  const size_t held = pending_.size();
  pending_ += piece;
  // Held-back bytes are a well-formed start; the first error, if any, is in their sequence,
  // and it is theirs alone when it ends before the pushed token's bytes.
  carried_ = 0;
  if (held > 0) {
    const Utf8Char first = utf8_decode(pending_);
    if (first.status == Utf8Status::kInvalid && static_cast<size_t>(first.length) <= held) {
      carried_ = kReplacementUtf8.size();
    }
  }
  const size_t hold = utf8_incomplete_suffix_length(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  carried_ = 0;
  num_pushed_ = 0;
  started_with_bos_ = false;
  return out;
}

}  // namespace sluice
