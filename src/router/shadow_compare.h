// Shadow traffic's comparison (router.h): the primary's answer, as the client got it, against
// the shadow's answer to the same request, which nobody gets.
//
// An answer is read from an OpenAI completion or chat completion, whole or streamed (the
// events' text and deltas joined), choice 0: its text, finish reason, and where it returned
// logprobs, each token's byte span in the text and its log-probability (completions' text_offset,
// chat's bytes). The router asks every shadow request for logprobs (they never reach a client),
// so the shadow's side always has its tokens.
//
// The comparison:
//   exact              the texts are byte for byte equal (and so are the finish reasons)
//   first_diff_byte    where the texts first differ (-1 when equal)
//   first_diff_token   which token that is, counted in the tokens of whichever side has them
//                      (the shadow's first): the first token that does not lie wholly inside the
//                      common prefix (-1 when equal or when neither side has tokens)
//   edit_distance      Levenshtein distance over Unicode code points / the longer text's length,
//                      0 (equal) .. 1 (nothing in common); texts past kMaxEditChars code points
//                      are compared on their first kMaxEditChars (bounded work: O(n^2))
//   length_ratio       shadow / primary length in code points (1 when both are empty)
//   finish_match       the finish reasons are equal
//   json               when the primary's text parses as JSON: whether the shadow's does too
//   logprob_gap        when both returned logprobs: the mean of shadow - primary log-probability
//                      over the primary's tokens up to the first differing one (the tokens both
//                      sampled, so both distributions scored the same text); NaN otherwise
//
// A request sampled without a seed (temperature > 0, no `seed`) cannot be expected to match by
// text: it is compared by score (finish reason, JSON validity, length ratio within [0.5, 2]),
// and `agrees` says so; otherwise `agrees` is `exact`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sluice::router {

struct ShadowAnswer {
  bool ok = false;            // a 2xx answer that was read whole
  int status = 0;             // its HTTP status; 0: no answer at all
  std::string error;          // what went wrong, when not ok
  std::string text;
  std::string finish_reason;
  std::vector<size_t> token_ends;  // the byte offset in `text` where each token ends
  std::vector<double> logprobs;    // each token's log-probability, when returned
  int64_t completion_tokens = -1;  // from usage
};

// From a whole answer's body (a JSON completion) or from a stream's bytes (server-sent events).
ShadowAnswer read_answer(int status, std::string_view body, bool stream);

inline constexpr size_t kMaxEditChars = 2000;

struct ShadowComparison {
  bool sampled = false;  // compared by score, not by text (see above)
  bool exact = false;
  bool agrees = false;
  int64_t first_diff_byte = -1, first_diff_token = -1;
  double edit_distance = 0;
  double length_ratio = 1;
  bool finish_match = true;
  bool primary_json = false, shadow_json = false;  // shadow_json only meaningful when primary_json
  double logprob_gap = 0;
  bool has_logprob_gap = false;
};

// The request's body says whether it was sampled without a seed.
bool sampled_without_seed(const nlohmann::ordered_json& body);
ShadowComparison compare_answers(const ShadowAnswer& primary, const ShadowAnswer& shadow, bool sampled);
nlohmann::ordered_json to_json(const ShadowComparison& c);

// Levenshtein distance over code points (invalid UTF-8 bytes count as one each).
size_t edit_distance(std::string_view a, std::string_view b, size_t max_chars = kMaxEditChars);

}  // namespace sluice::router
