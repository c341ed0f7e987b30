#include "chat/message_forms.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace sluice::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kQuestion = "sluice probe question";
constexpr const char* kText = "sluice probe text";
constexpr const char* kKey = "sluice_probe_key";

std::optional<std::string> try_render(const ChatTemplate& tmpl, const Json& messages, bool add_generation_prompt) {
  auto out = tmpl.render(template_context(messages, Json(nullptr), Json::object(), add_generation_prompt, "", ""));
  if (!out) return std::nullopt;
  return std::move(*out);
}

bool object_arguments(const ChatTemplate& tmpl) {
  const Json object = {{kKey, "sluice probe value"}};
  const std::string text = object.dump(-1, ' ', false);  // {"sluice_probe_key":"sluice probe value"}
  auto conversation = [&](const Json& content, const Json& arguments) {
    const Json call = {{"id", "sluice001"},  // 9 letters and digits: Mistral's templates check ids
                       {"type", "function"},
                       {"function", {{"name", "sluice_probe"}, {"arguments", arguments}}}};
    return Json::array({{{"role", "user"}, {"content", kQuestion}},
                        {{"role", "assistant"}, {"content", content}, {"tool_calls", Json::array({call})}}});
  };
  // Null content first (as clients send a call), then "" for templates that concatenate it.
  for (const Json& content : {Json(nullptr), Json("")}) {
    const auto as_object = try_render(tmpl, conversation(content, object), false);
    if (as_object && as_object->find(fmt::format("\"{}\"", kKey)) != std::string::npos) return true;
    const auto as_text = try_render(tmpl, conversation(content, text), false);
    if (as_text && as_text->find(text) != std::string::npos) return false;
  }
  return true;
}

bool takes_parts_for(const ChatTemplate& tmpl, const std::string& role) {
  auto conversation = [&](const Json& content) {
    const Json probe = {{"role", role}, {"content", content}};
    const Json question = {{"role", "user"}, {"content", kQuestion}};
    if (role == "system") return Json::array({probe, question});
    if (role == "assistant") return Json::array({question, probe});
    return Json::array({probe});
  };
  const auto as_string = try_render(tmpl, conversation(kText), true);
  if (!as_string || as_string->find(kText) == std::string::npos) return false;
  const auto as_parts = try_render(tmpl, conversation(Json::array({{{"type", "text"}, {"text", kText}}})), true);
  return as_parts == as_string;
}

}  // namespace

bool MessageForms::takes_parts(const std::string& role) const {
  return std::ranges::find(parts_roles, role) != parts_roles.end();
}

MessageForms probe_message_forms(const ChatTemplate& tmpl) {
  MessageForms forms;
  forms.object_arguments = object_arguments(tmpl);
  for (const char* role : {"system", "user", "assistant"}) {
    if (takes_parts_for(tmpl, role)) forms.parts_roles.emplace_back(role);
  }
  return forms;
}

}  // namespace sluice::chat
