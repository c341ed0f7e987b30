// Renders a suite's templates (prompts, assertion values, dataset mappings) over a test's vars
// with the project's Jinja interpreter (chat/), which also reads promptfoo's Nunjucks prompts
// ({{ var }}, filters, if/for). Undefined variables print as "", as in both.
#pragma once

#include <string>

#include "common/status.h"
#include "eval/suite.h"
#include "eval/yaml_json.h"

namespace sluice::eval {

Result<std::string> render(const std::string& source, const Json& vars);

// Strings inside `value` (an assertion's value: a string, or lists and objects of them)
// rendered over `vars`; numbers and the rest unchanged.
Result<Json> render_value(const Json& value, const Json& vars);

// A suite prompt over a test's vars: the completion text, or, for a chat prompt, its messages
// with each content rendered (text then empty).
struct RenderedPrompt {
  std::string text;
  Json messages;  // null for a completion prompt
};
Result<RenderedPrompt> render_prompt(const Prompt& prompt, const Json& vars);

}  // namespace sluice::eval
