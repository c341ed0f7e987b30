// A JSON Schema validator for what eval's json-schema / is-json assertions check: the
// validation keywords of JSON Schema 2020-12 (https://json-schema.org/draft/2020-12/json-schema-validation)
// that describe an answer's shape:
//   type (one or a list; "integer" is a number without a fraction), enum, const,
//   properties, required, additionalProperties (false or a schema), items (a schema),
//   prefixItems, minItems, maxItems, uniqueItems, minLength, maxLength (in code points),
//   pattern (ECMAScript-like, through PCRE2), minimum, maximum, exclusiveMinimum,
//   exclusiveMaximum, multipleOf, anyOf, oneOf, allOf, not, and $ref to "#/$defs/NAME" or
//   "#/definitions/NAME". Annotations (title, description, examples, $schema, $id) are ignored.
// Any other keyword makes the schema itself invalid (an error, so a check is never skipped).
#pragma once

#include <string>

#include "common/status.h"
#include "eval/yaml_json.h"

namespace sluice::eval {

// Ok when `value` is valid; else the first violation with its JSON pointer, e.g.
// "/items/2/name: expected a string, got number". kInvalid when the schema is not one.
Status validate_json(const Json& value, const Json& schema);

// PCRE2 search (UTF mode, with a match limit): true when `pattern` matches somewhere in `text`.
Result<bool> regex_search(const std::string& pattern, const std::string& text, bool ignore_case = false);

}  // namespace sluice::eval
