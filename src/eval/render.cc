#include "eval/render.h"

#include "chat/chat_template.h"

namespace sluice::eval {

Result<std::string> render(const std::string& source, const Json& vars) {
  if (source.find("{{") == std::string::npos && source.find("{%") == std::string::npos) return source;
  auto t = chat::ChatTemplate::parse(source);
  if (!t) return Error(StatusCode::kInvalid, "template '{}': {}", source.substr(0, 60), t.error().message());
  auto out = t->render(vars.is_object() ? vars : Json::object());
  if (!out) return Error(StatusCode::kInvalid, "template '{}': {}", source.substr(0, 60), out.error().message());
  // The interpreter drops one trailing newline of a template (jinja2's keep_trailing_newline
  // off, as chat templates are rendered); a prompt keeps it, as Nunjucks does.
  if (source.ends_with('\n')) *out += '\n';
  return std::move(*out);
}

Result<Json> render_value(const Json& value, const Json& vars) {
  if (value.is_string()) {
    SLUICE_ASSIGN_OR_RETURN(std::string s, render(value.get<std::string>(), vars));
    return Json(std::move(s));
  }
  if (value.is_array() || value.is_object()) {
    Json out = value;
    for (auto it = out.begin(); it != out.end(); ++it) {
      SLUICE_ASSIGN_OR_RETURN(*it, render_value(*it, vars));
    }
    return out;
  }
  return value;
}

Result<RenderedPrompt> render_prompt(const Prompt& prompt, const Json& vars) {
  RenderedPrompt r;
  if (!prompt.messages.is_array()) {
    SLUICE_ASSIGN_OR_RETURN(r.text, render(prompt.text, vars));
    return r;
  }
  r.messages = Json::array();
  for (const Json& m : prompt.messages) {
    SLUICE_ASSIGN_OR_RETURN(std::string content, render(m["content"].get<std::string>(), vars));
    Json rendered = m;
    rendered["content"] = std::move(content);
    r.messages.push_back(std::move(rendered));
  }
  return r;
}

}  // namespace sluice::eval
