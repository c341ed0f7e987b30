#include "chat/message_forms.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>

namespace sluice::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kQuestion = "sluice probe question";
constexpr const char* kText = "sluice probe text";
constexpr const char* kSecondText = ", and more";
constexpr const char* kKey = "sluice_probe_key";

std::optional<std::string> try_render(const ChatTemplate& tmpl, const Json& messages, bool add_generation_prompt) {
  // As the server renders (strftime_now defined: a template may call it unguarded), at one
  // fixed time, so two renders compared never straddle a change of date.
  RenderOptions options;
  options.now = std::chrono::system_clock::time_point(std::chrono::seconds(1'767'225'600));  // 2026-01-01
  auto out =
      tmpl.render(template_context(messages, Json(nullptr), Json::object(), add_generation_prompt, "", ""), options);
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
  // Two parts against their texts concatenated: a template that loops over the parts renders
  // both, as it renders the string; one that reads the first part alone (Gemma 3's system
  // prompt: content[0]['text']) or prints the list differs, and gets the parts joined.
  const auto as_string = try_render(tmpl, conversation(std::string(kText) + kSecondText), true);
  if (!as_string || as_string->find(std::string(kText) + kSecondText) == std::string::npos) return false;
  const Json parts = Json::array({{{"type", "text"}, {"text", kText}}, {{"type", "text"}, {"text", kSecondText}}});
  return try_render(tmpl, conversation(parts), true) == as_string;
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
