// Fuzz target: any bytes as a chat template, and after the first NUL byte, as the JSON
// context it is rendered with (the default context when absent or not an object), through
// ChatTemplate::parse and render under tight limits. Each yields a value or an error, never a
// crash, a hang or an exception.
#include "fuzz/chat_template_fuzz.h"

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace {

nlohmann::ordered_json default_context() {
  return {{"messages",
           {{{"role", "system"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", "Hi <b>&'\""}},
            {{"role", "assistant"}, {"content", "Hello."}},
            {{"role", "user"}, {"content", "What is 2+2?"}}}},
          {"tools", {{{"type", "function"}, {"function", {{"name", "add"}, {"parameters", {{"type", "object"}}}}}}}},
          {"add_generation_prompt", true},
          {"bos_token", "<s>"},
          {"eos_token", "</s>"}};
}

}  // namespace

int sluice_fuzz_chat_template(const uint8_t* data, size_t size) {
  using namespace sluice::chat;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  nlohmann::ordered_json context = default_context();
  if (nul != std::string_view::npos) {
    // The context is the harness's, not the code under test: a JSON parser's exception here
    // only means "use the default".
    try {
      auto parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) context = std::move(parsed);
    } catch (const nlohmann::json::exception&) {
    }
  }
  auto tmpl = ChatTemplate::parse(input.substr(0, nul));
  if (!tmpl) return 0;
  RenderOptions options;  // the limits of src/chat/mutation_test.cc
  options.limits.max_output_bytes = 1 << 16;
  options.limits.max_list_items = 1 << 12;
  options.limits.max_loop_iterations = 20'000;
  options.limits.max_steps = 200'000;
  options.limits.max_work = 2'000'000;
  return tmpl->render(context, options) ? 2 : 1;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sluice_fuzz_chat_template(data, size);
  return 0;
}
