// The chat parts of a request body (chat_messages.h).
#include "server/chat_messages.h"

#include <fmt/format.h>

#include "server/request_fields.h"

namespace sluice::server {
namespace {

// tool_choice: "auto" (the default: the tools are in the prompt) or "none" (they are left
// out, so the model cannot call them). "required" and a named tool need constrained output.
ApiResult<bool> tools_in_prompt(const Json& body) {
  const Json* choice = field(body, "tool_choice");
  if (!choice) return true;
  if (!field(body, "tools")) {
    return std::unexpected(ApiError::invalid("'tool_choice' is only allowed when 'tools' are given", "tool_choice"));
  }
  if (*choice == "auto") return true;
  if (*choice == "none") return false;
  // OpenAI's values: "none", "auto", "required", or {"type": "function", "function": {"name"}};
  // anything else is not a choice at all.
  // An object with a type (a named function, allowed_tools, custom) is a choice sluice lacks.
  const bool typed = choice->is_object() && choice->contains("type") && (*choice)["type"].is_string();
  if (*choice != "required" && !typed) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
                    "\"function\": {{\"name\": ...}}}}, got {}",
                    choice->dump().substr(0, 100)),
        "tool_choice"));
  }
  return std::unexpected(ApiError::invalid(
      fmt::format("'tool_choice' {} is not supported: sluice cannot force a tool call (use \"auto\" or \"none\")",
                  choice->dump().substr(0, 100)),
      "tool_choice"));
}

// Chat message content: a string, null, or a list of text parts, each put as
// {"type": "text", "text"} (an assistant's refusal, sent back in the history, is its text);
// anything else (images, audio) is refused. Which form the template gets is for_template's.
ApiResult<Json> check_content(const Json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) {
    return std::unexpected(ApiError::invalid(
        fmt::format("'{}' must be a string or an array of content parts, got {}", param, json_type_name(content)), param));
  }
  Json parts = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const Json* type = part.is_object() ? field(part, "type") : nullptr;
    if (!type || !type->is_string()) {
      return std::unexpected(ApiError::invalid(fmt::format("'{}[{}]' must be an object with a 'type'", param, i), param));
    }
    const bool refusal = *type == "refusal";
    if (*type != "text" && !refusal) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'{}[{}]' has type '{}'; only text content is supported", param, i, type->get<std::string>()),
          param));
    }
    const char* key = refusal ? "refusal" : "text";
    const Json* t = field(part, key);
    if (!t || !t->is_string()) {
      return std::unexpected(ApiError::invalid(fmt::format("'{}[{}].{}' must be a string", param, i, key), param));
    }
    parts.push_back({{"type", "text"}, {"text", *t}});
  }
  return parts;
}

// An assistant message's tool_calls, checked; `function.arguments` stays the JSON text sent
// (absent or null: "{}"), for_template gives the template an object where it wants one. Null
// or [] (some clients send them) is no call, and the key is dropped: templates test
// `'tool_calls' in message`.
// Returns whether the message calls a tool.
ApiResult<bool> parse_tool_calls(Json& message, const std::string& param) {
  const auto it = message.find("tool_calls");
  if (it == message.end()) return false;
  if (it->is_null() || (it->is_array() && it->empty())) {
    message.erase(it);
    return false;
  }
  if (message["role"] != "assistant") {
    return std::unexpected(ApiError::invalid(fmt::format("'{}.tool_calls' is only for assistant messages", param), param));
  }
  if (!it->is_array()) return std::unexpected(wrong_type(param + ".tool_calls", "an array", *it));
  for (size_t k = 0; k < it->size(); ++k) {
    Json& call = (*it)[k];
    const std::string where = fmt::format("{}.tool_calls[{}]", param, k);
    const auto shape_error = [&] {
      return std::unexpected(ApiError::invalid(
          fmt::format("'{}' must be {{\"id\": ID, \"type\": \"function\", \"function\": {{\"name\": NAME, "
                      "\"arguments\": JSON_TEXT}}}} (a non-empty name; id, if given, a string)",
                      where),
          param));
    };
    if (!call.is_object()) return shape_error();
    const Json* type = field(call, "type");
    const Json* id = field(call, "id");
    Json* fn = call.contains("function") && call["function"].is_object() ? &call["function"] : nullptr;
    const Json* name = fn ? field(*fn, "name") : nullptr;
    if ((type && *type != "function") || (id && !id->is_string()) || !fn || !name || !name->is_string() ||
        name->get<std::string>().empty()) {
      return shape_error();
    }
    const auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      (*fn)["arguments"] = "{}";
    } else if (!args->is_string() && !args->is_object()) {
      return std::unexpected(wrong_type(where + ".function.arguments", "a string of JSON", *args));
    }
  }
  return true;
}

}  // namespace

ApiResult<Json> parse_messages(const Json& body) {
  const Json* messages = field(body, "messages");
  if (!messages) return std::unexpected(ApiError::invalid("'messages' is required", "messages"));
  if (!messages->is_array()) return std::unexpected(wrong_type("messages", "an array", *messages));
  if (messages->empty()) return std::unexpected(ApiError::invalid("'messages' must not be empty", "messages"));
  Json out = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) {
      return std::unexpected(
          ApiError::invalid(fmt::format("'{}' must be an object, got {}", param, json_type_name(m)), param));
    }
    const Json* role = field(m, "role");
    if (!role || !role->is_string() || role->get<std::string>().empty()) {
      return std::unexpected(ApiError::invalid(fmt::format("'{}.role' must be a non-empty string", param), param));
    }
    Json copy = m;
    for (const char* key : {"name", "tool_call_id"}) {
      if (const Json* v = field(m, key); v && !v->is_string()) {
        return std::unexpected(wrong_type(fmt::format("{}.{}", param, key), "a string", *v));
      }
    }
    SLUICE_API_TRY(bool calls, parse_tool_calls(copy, param));
    const Json* content = field(m, "content");
    if (!content) {
      // Only an assistant message that calls tools may go without content.
      if (*role != "assistant" || !calls) {
        return std::unexpected(ApiError::invalid(fmt::format("'{}.content' is required", param), param));
      }
      copy["content"] = nullptr;
    } else {
      SLUICE_API_TRY(copy["content"], check_content(*content, i));
    }
    out.push_back(std::move(copy));
  }
  return out;
}

// What the chat template gets as `tools`: null when absent or when tool_choice is "none".
ApiResult<Json> parse_tools(const Json& body) {
  SLUICE_API_TRY(bool in_prompt, tools_in_prompt(body));
  const Json* tools = field(body, "tools");
  if (!tools) return Json(nullptr);
  if (!tools->is_array()) return std::unexpected(wrong_type("tools", "an array", *tools));
  // Each a function with a name: what every tool-calling template reads.
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const Json* type = t.is_object() ? field(t, "type") : nullptr;
    const Json* fn = t.is_object() ? field(t, "function") : nullptr;
    const Json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    const Json* parameters = fn && fn->is_object() ? field(*fn, "parameters") : nullptr;
    const Json* strict = fn && fn->is_object() ? field(*fn, "strict") : nullptr;
    if (strict && !strict->is_boolean()) return std::unexpected(wrong_type(fmt::format("tools[{}].function.strict", i), "a boolean", *strict));
    if (strict && strict->get<bool>()) {
      // A promise that the call's arguments follow the schema: sluice does not constrain them.
      return std::unexpected(ApiError::invalid(
          fmt::format("'tools[{}].function.strict' true is not supported: sluice does not constrain tool calls to "
                      "their schema",
                      i),
          "tools"));
    }
    if (!type || *type != "function" || !name || !name->is_string() || name->get<std::string>().empty() ||
        (parameters && !parameters->is_object())) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'tools[{}]' must be {{\"type\": \"function\", \"function\": {{\"name\": NAME, "
                      "\"parameters\": {{...}}}}}} (a non-empty name; parameters, if given, an object)",
                      i),
          "tools"));
    }
  }
  return in_prompt ? *tools : Json(nullptr);
}

ApiResult<Json> parse_template_kwargs(const Json& body) {
  const Json* kwargs = field(body, "chat_template_kwargs");
  if (!kwargs) return Json::object();
  if (!kwargs->is_object()) return std::unexpected(wrong_type("chat_template_kwargs", "an object", *kwargs));
  // The request's own fields give these (Hugging Face's renderer refuses them twice): set here
  // they would replace the messages unseen, past every check made on them.
  for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
    if (kwargs->contains(reserved)) {
      return std::unexpected(ApiError::invalid(
          fmt::format("'chat_template_kwargs' cannot set '{}': it comes from the request's own field", reserved),
          "chat_template_kwargs"));
    }
  }
  return *kwargs;
}

Json for_template(const Json& messages, const chat::MessageForms& forms) {
  Json out = messages;
  for (Json& m : out) {
    const auto content = m.find("content");
    if (content != m.end() && content->is_array() &&
        (content->size() <= 1 || !forms.takes_parts(m.value("role", std::string())))) {
      std::string text;
      for (size_t i = 0; i < content->size(); ++i) {
        if (i > 0) text += '\n';
        text += (*content)[i]["text"].get<std::string>();
      }
      *content = std::move(text);
    }
    const auto calls = m.find("tool_calls");
    if (calls == m.end()) continue;
    for (Json& call : *calls) {
      Json& args = call["function"]["arguments"];
      if (forms.object_arguments && args.is_string()) {
        // Text that is not a JSON object (a model's malformed call, sent back) stays text.
        Json parsed = Json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) args = std::move(parsed);
      } else if (!forms.object_arguments && args.is_object()) {
        args = args.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
      }
    }
  }
  return out;
}

}  // namespace sluice::server
