// Which fields each route of the OpenAI API takes: a field sluice implements passes, a field it
// ignores (kIgnoredFields) passes when of the type OpenAI takes, a field it does not implement
// is refused by name and what it would do, and a field it accepts only at its no-op value is
// refused at any other. Nothing that would change the answer is silently dropped.
#pragma once

#include "server/openai_protocol.h"

namespace sluice::server {

enum Route : unsigned { kCompletion = 1, kChat = 2, kTokenize = 4, kDetokenize = 8 };

// A 400 for the first field of the body that `route` does not take (null counts as absent).
ApiResult<bool> check_field_names(const Json& body, unsigned route);
// A 400 for a field accepted only at its no-op value (logit_bias {}, suffix "", best_of = n, ...)
// sent with another.
ApiResult<bool> refuse_unsupported(const Json& body);

}  // namespace sluice::server
