// Renders a suite's templates (prompts, assertion values, dataset mappings) over a test's vars
// with the project's Jinja interpreter (chat/), which also reads promptfoo's Nunjucks prompts
// ({{ var }}, filters, if/for). Undefined variables print as "", as in both.
#pragma once

#include <string>

#include "common/status.h"
#include "eval/yaml_json.h"

namespace sluice::eval {

Result<std::string> render(const std::string& source, const Json& vars);

// Strings inside `value` (an assertion's value: a string, or lists and objects of them)
// rendered over `vars`; numbers and the rest unchanged.
Result<Json> render_value(const Json& value, const Json& vars);

}  // namespace sluice::eval
