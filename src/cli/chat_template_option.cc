#include "cli/chat_template_option.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice {

Result<ChosenChatTemplate> choose_chat_template(const gguf::File& model, const std::string& template_file,
                                                std::string_view used_by) {
  std::string source, from;
  if (!template_file.empty()) {
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
  return ChosenChatTemplate{std::move(*parsed), std::move(from)};
}

}  // namespace sluice
