// promptfoo's conventions that sluice's suite reader follows
// (https://www.promptfoo.dev/docs/configuration/test-cases/ and .../prompts/): the reserved CSV
// columns, assertions written as strings, list vars expanded into one test per combination,
// and text files holding several prompts.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/yaml_json.h"

namespace sluice::eval {

// promptfoo's reserved test columns (https://www.promptfoo.dev/docs/configuration/test-cases/,
// "CSV format"), taken out of a test's vars:
//   __expected, __expected1, __expected2, ...  one assertion each, written as a string (below);
//   __description, __metric (every assertion of the row's), __threshold (the test's score);
//   __config:__expected[N]:threshold  the threshold of that column's assertion;
//   __metadata:KEY  a label for people (dropped).
// Anything else starting with "__" (__prefix, __suffix, __providerOutput) is listed in
// `not_supported`. Empty cells are skipped, as promptfoo does.
struct ReservedColumns {
  std::vector<Json> asserts;   // assertion specs, as a suite's `assert` list holds them
  std::string description;
  std::optional<double> threshold;
  std::vector<std::string> not_supported;
  std::vector<std::string> errors;  // a __threshold or __config value that is not a number
};
ReservedColumns take_reserved_columns(Json& vars, bool (*known)(std::string_view type));

// One assertion written as a string, promptfoo's way: "TYPE", "TYPE:VALUE" or "TYPE(THRESHOLD):VALUE",
// with "not-" to negate; contains-any/-all split VALUE at commas; "grade:" and "llm-rubric:"
// are llm-rubric; any other text is `equals` that text. `known` says whether a word names an
// assertion type (one sluice lacks still parses, so it is reported as not implemented).
Json assertion_from_string(std::string_view text, bool (*known)(std::string_view type));

// A test's vars with lists of strings expanded, promptfoo's way: one set of vars per combination
// of the lists' values (the first list varies slowest); a list of anything else is one value,
// and vars without a list come back as the one set. Past `most` combinations: nullopt.
std::optional<std::vector<Json>> expand_list_vars(const Json& vars, size_t most);

// The prompts of a text file: several when lines holding only "---" separate them (each then
// trimmed, the empty ones dropped); otherwise the text as it is.
std::vector<std::string> split_prompts(std::string_view text);

}  // namespace sluice::eval
