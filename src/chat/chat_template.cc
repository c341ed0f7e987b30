#include "chat/chat_template.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <functional>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace sluice::chat {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  try {
    SLUICE_ASSIGN_OR_RETURN(TemplateAst ast, parse_template(source));
    SLUICE_ASSIGN_OR_RETURN(LexedTemplate lexed, lex_template(source));  // (it lexed as it parsed)
    auto literals = std::make_shared<std::vector<std::string>>();
    for (Token& t : lexed.tokens) {
      if (t.kind == TokenKind::kString) literals->push_back(std::move(t.value));
    }
    std::ranges::sort(*literals);
    return ChatTemplate(std::string(source), std::make_shared<const TemplateAst>(std::move(ast)), std::move(literals));
  } catch (const std::exception& e) {  // std::bad_alloc, or a library throwing underneath
    return Error("chat template: parse failed: {}", e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  try {
    if (!context.is_object()) return Error(StatusCode::kInvalid, "chat template context must be a JSON object");
    SLUICE_ASSIGN_OR_RETURN(Value value, from_json(context, options.limits.max_json_depth));
    return render_value(value, options);
  } catch (const std::exception& e) {
    return Error("chat template: render failed: {}", e.what());
  }
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  try {
    // A plain json object iterates its keys sorted; the copy keeps that order.
    return render(nlohmann::ordered_json(context), options);
  } catch (const std::exception& e) {
    return Error("chat template: render failed: {}", e.what());
  }
}

Result<std::string> ChatTemplate::render_value(const Value& context, const RenderOptions& options) const {
  Interpreter interp(*ast_, options);
  return interp.render(context);
}

bool ChatTemplate::names(std::string_view identifier) const {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = source_.find(identifier); at != std::string::npos; at = source_.find(identifier, at + 1)) {
    const size_t end = at + identifier.size();
    if ((at == 0 || !word_char(source_[at - 1])) && (end == source_.size() || !word_char(source_[end]))) return true;
  }
  return false;
}

bool ChatTemplate::quotes(std::string_view text) const {
  return std::ranges::binary_search(*literals_, text, std::less<>());
}

std::string_view default_chatml_template() {
  return "{%- for message in messages %}"
         "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
         "{%- endfor %}"
         "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
}

}  // namespace sluice::chat
