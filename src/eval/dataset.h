// Rows of a dataset file, as JSON objects: JSON Lines (one object per line; blank lines skipped)
// or CSV (RFC 4180: a header row names the columns; quoted fields may hold commas, quotes written
// twice and newlines; every value is a string). The format is chosen by the extension (.jsonl,
// .csv); errors name the file and the line.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "eval/yaml_json.h"

namespace sluice::eval {

Result<std::vector<Json>> read_rows(const std::string& path);
Result<std::vector<Json>> parse_csv(std::string_view text, const std::string& name);
Result<std::vector<Json>> parse_jsonl(std::string_view text, const std::string& name);

// The whole file, or an error naming it.
Result<std::string> read_file(const std::string& path);

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

}  // namespace sluice::eval
