// Rows of a dataset file, as JSON objects: JSON Lines (one object per line; blank lines skipped)
// or CSV (RFC 4180: a header row names the columns; quoted fields may hold commas, quotes written
// twice and newlines; every value is a string). The format is chosen by the extension (.jsonl,
// .csv); errors name the file and the line.
#pragma once

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

}  // namespace sluice::eval
