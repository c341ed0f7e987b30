#include "cli/chat_template_option.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice {
namespace {

// A template that leaves the messages out (an empty file, a fixed text) would have every chat
// request reach the model without what was asked: refused at start. One that fails on a lone
// user message may still take the conversations it was written for: a warning.
Status check_renders_the_user(const chat::ChatTemplate& tmpl, const std::string& from) {
  constexpr std::string_view kQuestion = "sluice start-up check: the user's question";
  const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", kQuestion}}});
  // As the server renders: strftime_now defined (a template may call it unguarded).
  chat::RenderOptions options;
  options.now = std::chrono::system_clock::now();
  auto prompt =
      tmpl.render(chat::template_context(messages, nlohmann::json(), nlohmann::json::object(), true, "", ""), options);
  if (!prompt) {
    std::cerr << "warning: the chat template (" << from
              << ") fails on a conversation of one user message: " << prompt.error().message() << "\n";
    return Status::ok();
  }
  if (prompt->find(kQuestion) != std::string::npos) return Status::ok();
  return Status::error(fmt::format(
      "chat template ({}): a conversation of one user message renders {}, without the message's text, so no "
      "chat request would reach the model",
      from, prompt->empty() ? "an empty prompt" : fmt::format("'{}'", prompt->substr(0, 80))));
}

}  // namespace

Result<ChosenChatTemplate> choose_chat_template(const gguf::File& model, const std::string& template_file,
                                                std::string_view used_by) {
  std::string source, from;
  if (!template_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(template_file, ec)) {  // (a pipe, as from <(...), reads as a file)
      return Error(StatusCode::kInvalid, "--chat-template '{}' is a folder: give the template's file", template_file);
    }
    std::ifstream in(template_file);
    if (!in) return Error(StatusCode::kInvalid, "cannot read --chat-template '{}': {}", template_file, std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
    from = template_file;
  } else if (auto t = model.get_string("tokenizer.chat_template")) {
    source = std::string(*t);
    from = "the model's own (tokenizer.chat_template)";
  } else {
    source = std::string(chat::default_chatml_template());
    from = "the default ChatML";
    std::cerr << "warning: the model has no chat template (tokenizer.chat_template); " << used_by
              << " the default ChatML template. Pass --chat-template FILE to use another.\n";
  }
  auto parsed = chat::ChatTemplate::parse(source);
  if (!parsed) return Error(StatusCode::kInvalid, "chat template ({}): {}", from, parsed.error().message());
  SLUICE_RETURN_IF_ERROR(check_renders_the_user(*parsed, from));
  return ChosenChatTemplate{std::move(*parsed), std::move(from)};
}

}  // namespace sluice
