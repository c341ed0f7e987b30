// MessageForms: which form of two OpenAI message fields a chat template reads, found once by
// rendering small probe conversations with each form.
//
// The OpenAI API sends both fields in one form and templates were written for either:
//   - tool_calls[].function.arguments arrives as JSON text. Most tool templates (Qwen2.5,
//     Llama 3.1+, Mistral, Hermes) print `arguments | tojson` and need an object (as
//     transformers and vLLM pass it); DeepSeek-R1's concatenates `'```json\n' + arguments`,
//     which fails on an object, and a template that prints `{{ arguments }}` would show an
//     object as a Python dict. So: an object where the object's keys come out as JSON, else
//     the text where the text comes out as sent, else an object.
//   - content arrives as a string or as a list of {"type": "text", "text"} parts. Most
//     templates concatenate it as a string (a list fails there, or prints as a Python list);
//     Gemma 3's loops over a user's or assistant's parts and trims each, so "a " + " b" is "ab"
//     to it, where the parts joined with a newline would give "a \n b". A role whose list of
//     two parts renders as the string of both texts takes lists; each role is probed on its
//     own (Gemma 3 reads only the first part of a system prompt, content[0]['text']: its
//     system parts are joined, or the rest would be dropped).
//
// A probe that fails to render (a template that refuses the shape of the probe conversation)
// leaves that field in its usual form: an object, a string.
#pragma once

#include <string>
#include <vector>

#include "chat/chat_template.h"

namespace sluice::chat {

struct MessageForms {
  bool object_arguments = true;          // arguments as an object; else the JSON text as sent
  std::vector<std::string> parts_roles;  // roles whose content may be a list of text parts

  bool takes_parts(const std::string& role) const;
};

// Renders at most 10 small conversations; call once per template (it is not cheap per request).
MessageForms probe_message_forms(const ChatTemplate& tmpl);

}  // namespace sluice::chat
