// The chat parts of a request body (/v1/chat/completions, and /tokenize with messages), checked
// and put in the forms chat templates read: messages, tools, and extra template variables.
// Each error is a 400 naming the field ("messages[2].content").
#pragma once

#include "chat/message_forms.h"
#include "server/openai_protocol.h"

namespace sluice::server {

// `messages`: required, a non-empty array of {role, content, ...}. Content is a string, null,
// or a list of {"type": "text", "text"} parts (text and refusal parts; images and audio are
// refused); an assistant's tool_calls keep `function.arguments` as the JSON text sent.
ApiResult<Json> parse_messages(const Json& body);
// The checked messages in the forms the template reads (chat/message_forms.h): content parts
// joined with newlines into one string, unless the role takes lists and there are two or more;
// arguments an object where the template wants one and the text holds one.
Json for_template(const Json& messages, const chat::MessageForms& forms);
// What the chat template gets as `tools`: null when absent or when tool_choice is "none";
// tool_choice "required" or a named tool is refused (sluice cannot force a call).
ApiResult<Json> parse_tools(const Json& body);
// `chat_template_kwargs`: an object of extra template variables (vLLM's extension); {} when absent.
// It cannot set what the request's own fields give (messages, tools, documents, add_generation_prompt).
ApiResult<Json> parse_template_kwargs(const Json& body);

}  // namespace sluice::server
