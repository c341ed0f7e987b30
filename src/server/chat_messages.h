// The chat parts of a request body (/v1/chat/completions, and /tokenize with messages), checked
// and put in the form chat templates read: messages with string content, tools, and extra
// template variables. Each error is a 400 naming the field ("messages[2].content").
#pragma once

#include "server/openai_protocol.h"

namespace sluice::server {

// `messages`: required, a non-empty array of {role, content, ...}. Content parts are joined
// into one string (text and refusal parts; images and audio are refused; null content stays
// null); an assistant's tool_calls get `function.arguments` as a JSON object where the text
// holds one.
ApiResult<Json> parse_messages(const Json& body);
// What the chat template gets as `tools`: null when absent or when tool_choice is "none";
// tool_choice "required" or a named tool is refused (sluice cannot force a call).
ApiResult<Json> parse_tools(const Json& body);
// `chat_template_kwargs`: an object of extra template variables (vLLM's extension); {} when absent.
// It cannot set what the request's own fields give (messages, tools, documents, add_generation_prompt).
ApiResult<Json> parse_template_kwargs(const Json& body);

}  // namespace sluice::server
