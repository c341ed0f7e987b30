// ChatTemplate: turns OpenAI-style `messages` into a prompt with a model's own Jinja chat
// template (GGUF metadata `tokenizer.chat_template`, or tokenizer_config.json's
// `chat_template`), rendering it the way Hugging Face transformers' apply_chat_template
// does, so the prompt is byte for byte the one the model was trained on.
//
// The environment reproduced is transformers' (src/transformers/utils/chat_template_utils.py):
// jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]); globals raise_exception(msg) and strftime_now(fmt); and its
// own tojson filter = json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), which does NOT HTML-escape '<', '>', '&', '\'' the way jinja2's builtin
// tojson does (that would put \u003c into prompts the model never saw in training).
//
// Usage:
//   SLUICE_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(gguf_template_text));
//   nlohmann::ordered_json ctx = {{"messages", messages}, {"add_generation_prompt", true},
//                                 {"bos_token", "<s>"}, {"eos_token", "</s>"}};
//   SLUICE_ASSIGN_OR_RETURN(std::string prompt, tmpl.render(ctx));
//
// The context is any JSON object; its keys become template variables (messages, tools,
// add_generation_prompt, bos_token, ...). Pass nlohmann::ordered_json to keep the request's
// key order: templates print tool schemas with tojson, and Python keeps insertion order.
//
// Errors: parse() fails on syntax errors; render() fails on runtime errors and on any
// limit in RenderOptions; both say "line L, column C". A template's raise_exception(msg)
// (e.g. "Conversation roles must alternate user/assistant/...") fails with
// StatusCode::kInvalid and exactly msg, since it means the request's messages are wrong.
// No exception escapes either call.
//
// Thread-safety: a parsed ChatTemplate is immutable; render() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "chat/jinja_interpreter.h"
#include "common/status.h"

namespace sluice::chat {

struct TemplateAst;

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);

  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }
  // Whether the template's text names `identifier` as a whole word (a variable or attribute it
  // may read, e.g. "tools"). A template that never names it cannot render it.
  bool names(std::string_view identifier) const;
  // Whether the template's code holds `text` as a whole string literal ('tool' or "tool", not a
  // part of a longer one): a role it compares with. (Qwen2.5's says "function" only as an
  // attribute and in prose, Hermes' inside a longer literal; neither renders a "function" message.)
  bool quotes(std::string_view text) const;

 private:
  ChatTemplate(std::string source, std::shared_ptr<const TemplateAst> ast,
               std::shared_ptr<const std::vector<std::string>> literals)
      : source_(std::move(source)), ast_(std::move(ast)), literals_(std::move(literals)) {}
  Result<std::string> render_value(const Value& context, const RenderOptions& options) const;

  std::string source_;
  std::shared_ptr<const TemplateAst> ast_;
  std::shared_ptr<const std::vector<std::string>> literals_;  // the code's string literals, sorted
};

// The variables a chat template is rendered with, as Hugging Face's apply_chat_template passes
// them: `kwargs` (chat_template_kwargs) first, then what they do not set of messages, tools
// (null unless an array), documents (null), add_generation_prompt, bos_token and eos_token.
// (The server refuses kwargs that would set the first four: they come from the request.)
// JsonT: nlohmann::json, or ordered_json where key order reaches the template (tool schemas).
template <typename JsonT>
JsonT template_context(const JsonT& messages, const JsonT& tools, const JsonT& kwargs, bool add_generation_prompt,
                       const std::string& bos_token, const std::string& eos_token) {
  // One lookup per variable, so kwargs with 100,000 keys cost linear time (ordered_json
  // searches keys from the front).
  JsonT context = kwargs.is_object() ? kwargs : JsonT::object();
  const std::pair<const char*, JsonT> variables[] = {{"messages", messages},
                                                     {"tools", tools.is_array() ? tools : JsonT(nullptr)},
                                                     {"documents", nullptr},
                                                     {"add_generation_prompt", add_generation_prompt},
                                                     {"bos_token", bos_token},
                                                     {"eos_token", eos_token}};
  for (const auto& [key, value] : variables) {
    if (!context.contains(key)) context[key] = value;
  }
  return context;
}

// ChatML, for models that ship no template:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... and, with add_generation_prompt,
//   <|im_start|>assistant\n
std::string_view default_chatml_template();

}  // namespace sluice::chat
