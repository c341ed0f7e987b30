// The chat template a command renders chat messages with (serve, pair): --chat-template FILE,
// else the model's own (tokenizer.chat_template), else ChatML with a warning on stderr.
#pragma once

#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "common/status.h"
#include "gguf/gguf_reader.h"

namespace sluice {

struct ChosenChatTemplate {
  chat::ChatTemplate chat_template;
  std::string from;  // "the model's own (tokenizer.chat_template)", the file, or "the default ChatML"
};

// `used_by` completes the warning: "<used_by> the default ChatML template", e.g.
// "/v1/chat/completions uses".
Result<ChosenChatTemplate> choose_chat_template(const gguf::File& model, const std::string& template_file,
                                                std::string_view used_by);

}  // namespace sluice
