// YAML to JSON: suites are YAML (or JSON, a subset of YAML), read once into nlohmann's JSON so
// the rest of eval/ handles one document model.
//
// Scalars follow the YAML 1.2 core schema: a plain (unquoted) scalar is null (`~`, `null`, empty),
// a boolean (`true`, `false`, any case), an integer (decimal, 0x, 0o), a float (`1.5`, `1e3`,
// `.inf`, `.nan`) or else a string; a quoted or block scalar is always a string. Anchors and
// aliases are expanded (yaml-cpp does that), and merge keys (`<<: *defaults`) merged, the
// mapping's own keys first; mapping keys are strings, each at most once in a mapping. Errors name
// the line and column (from 1).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace sluice::eval {

using Json = nlohmann::ordered_json;

Result<Json> parse_yaml(std::string_view text);

}  // namespace sluice::eval
