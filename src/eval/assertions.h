// Grading an answer: each assertion gives a score in [0, 1] and a pass, the test combines them.
//
// Types (promptfoo's meanings where promptfoo has the type; `not-TYPE` inverts pass and score):
//   equals         the output is the value (a JSON value: the output parsed equals it)
//   contains, icontains, starts-with      substring (icontains ignores ASCII case)
//   contains-any, contains-all (and icontains-)   a list, or a comma-separated string
//   regex          PCRE2 search
//   is-json        the output parses as JSON; a value is a JSON Schema it must satisfy
//   contains-json  some {...} or [...] in the output parses (and satisfies the schema value)
//   json-schema    the output parses as JSON and satisfies the value (json_schema.h)
//   levenshtein    edit distance to the value, in code points; score 1 - distance / longer
//                  length; threshold < 1: the most normalized distance, >= 1: the most edits
//                  (promptfoo's meaning, default 5)
//   numeric        the first number in the output equals the value within threshold (default 0)
//   latency        the answer took at most threshold (or value) milliseconds
//   max-tokens     the completion used at most value tokens (usage.completion_tokens)
//   length         the output's length in code points: value N (at most N) or {min, max}
//   finish-reason  the choice's finish_reason is the value
//   logprob        the mean token logprob of the output is at least the value (needs logprobs)
//   perplexity     exp(-mean logprob) is at most the value (needs logprobs)
//   llm-rubric     a judge endpoint grades the output against the rubric (value); it answers
//                  JSON {"pass": bool, "score": number, "reason": text}; the judge's own answer
//                  is recorded. Pass: its pass and score >= threshold (when set).
// A test passes when, with a threshold, the weighted mean score reaches it, and otherwise when
// every assertion passes; an answer that failed to arrive fails every assertion.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "eval/client.h"
#include "eval/suite.h"

namespace sluice::eval {

struct AssertionResult {
  std::string type;       // as written, "not-" included
  bool pass = false;
  double score = 0;
  double weight = 1;
  std::string metric;
  std::string reason;     // why it failed (or what it measured)
  Json judge;             // llm-rubric: the judge's answer
};

struct Grade {
  bool pass = false;
  double score = 0;       // weighted mean of the assertion scores (1 when there are none)
  std::vector<AssertionResult> results;
};

// Asks a judge: the rubric prompt in, its reply (text) out. Errors are infrastructure errors.
using JudgeFn = std::function<Result<Reply>(const Provider& judge, const std::string& prompt)>;

// Grades `reply` for `test` (its assertion values rendered over `vars`). `judge`: the suite's
// default grader for llm-rubric (an assertion may name its own). Errors: a template or schema
// that is itself wrong, or a judge that could not be reached (not a failed grade).
Result<Grade> grade(const TestCase& test, const Reply& reply, const Json& vars, const std::optional<Provider>& judge,
                    const JudgeFn& ask_judge);

// One assertion (exposed for tests).
Result<AssertionResult> check_assertion(const Assertion& a, const Reply& reply, const Json& vars,
                                        const std::optional<Provider>& judge, const JudgeFn& ask_judge);

// A mistake in an assertion as written that grading would find only once the answers are in: a
// value missing, a limit missing or not a number (values a template fills are checked per test,
// when graded).
Status check_assertion_spec(const Assertion& a);

// Levenshtein distance in code points.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace sluice::eval
