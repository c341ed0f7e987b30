// The forms a chat request's messages reach each real template in (chat/message_forms.h):
// the request as an OpenAI client sends it (arguments as JSON text, content as parts), checked
// and put in the probed forms, renders byte for byte as Python jinja2 renders the form the
// template was written for (src/chat/testdata/expected).
#include <gtest/gtest.h>

#include "chat/test_util.h"
#include "server/chat_messages.h"

namespace sluice::server {
namespace {

using chat::testing::list_files;
using chat::testing::load_case;
using chat::testing::read_file;
using chat::testing::testdata_dir;

std::string stem_of(const std::string& file) { return file.substr(0, file.rfind('.')); }

// What the server renders for a golden case's messages sent as a request.
struct Served {
  chat::MessageForms forms;
  Result<std::string> prompt;
};
Served serve(const std::string& template_file, const std::string& case_name) {
  auto tmpl = chat::ChatTemplate::parse(read_file(testdata_dir() + "/templates/" + template_file));
  EXPECT_TRUE(tmpl) << template_file;
  const chat::testing::Case kase = load_case(case_name);
  auto messages = parse_messages(Json{{"messages", kase.context["messages"]}});
  EXPECT_TRUE(messages) << messages.error().message;
  Served out{chat::probe_message_forms(*tmpl), Error("not rendered")};
  Json context = kase.context;
  context["messages"] = for_template(*messages, out.forms);
  out.prompt = tmpl->render(context, kase.options);
  return out;
}

TEST(MessageForms, ToolCallArgumentsReachEachTemplateInItsForm) {
  int text_form = 0;
  for (const std::string& t : list_files(testdata_dir() + "/templates", ".jinja")) {
    SCOPED_TRACE(t);
    // The request sends the arguments as text (the case tools_string_arguments); the template
    // gets the form it prints right.
    const Served served = serve(t, "tools_string_arguments");
    const std::string expected =
        read_file(testdata_dir() + "/expected/" + stem_of(t) + "/" +
                  (served.forms.object_arguments ? "tools" : "tools_string_arguments") + ".txt");
    if (expected.starts_with("ERROR")) {
      EXPECT_FALSE(served.prompt);
    } else {
      ASSERT_TRUE(served.prompt) << served.prompt.error().message();
      EXPECT_EQ(*served.prompt, expected);
    }
    text_form += served.forms.object_arguments ? 0 : 1;
    // DeepSeek-R1's concatenates the text (an object fails there); the rest print tojson or
    // print no arguments.
    EXPECT_EQ(served.forms.object_arguments, !t.starts_with("deepseek-ai-DeepSeek-R1"));
  }
  EXPECT_EQ(text_form, 1);
}

TEST(MessageForms, ContentPartsReachATemplateThatLoopsOverThem) {
  for (const std::string& t : list_files(testdata_dir() + "/templates", ".jinja")) {
    SCOPED_TRACE(t);
    const Served served = serve(t, "content_parts");
    if (t.starts_with("google-gemma-3")) {
      // Gemma 3 trims each part: "First part. " and " Second part." are "First part.Second part."
      // to it, as jinja2 renders the parts.
      // Its system prompt reads content[0]['text'] alone: system parts are joined, not dropped.
      EXPECT_EQ(served.forms.parts_roles, (std::vector<std::string>{"user", "assistant"}));
      ASSERT_TRUE(served.prompt) << served.prompt.error().message();
      EXPECT_EQ(*served.prompt, read_file(testdata_dir() + "/expected/" + stem_of(t) + "/content_parts.txt"));
      auto tmpl = chat::ChatTemplate::parse(read_file(testdata_dir() + "/templates/" + t));
      ASSERT_TRUE(tmpl);
      auto messages = parse_messages(Json::parse(R"({"messages": [
          {"role": "system", "content": [{"type": "text", "text": "Be terse."}, {"type": "text", "text": "Answer in French."}]},
          {"role": "user", "content": []}]})"));
      ASSERT_TRUE(messages) << messages.error().message;
      auto prompt = tmpl->render(chat::template_context(for_template(*messages, served.forms), Json(nullptr),
                                                        Json::object(), true, "<bos>", "<eos>"));
      ASSERT_TRUE(prompt) << prompt.error().message();  // an empty list is "" (content[0] of [] would fail)
      EXPECT_NE(prompt->find("Be terse.\nAnswer in French."), std::string::npos) << *prompt;
    } else {
      // The rest concatenate content (a list fails or prints as a Python list): one string.
      EXPECT_TRUE(served.forms.parts_roles.empty());
      if (served.prompt) {
        EXPECT_NE(served.prompt->find("First part. \n Second part."), std::string::npos) << *served.prompt;
      }
    }
  }
}

// A probe that no form renders (a template that refuses the probe conversation) leaves the
// usual forms.
TEST(MessageForms, ATemplateThatRefusesTheProbesKeepsTheUsualForms) {
  auto tmpl = chat::ChatTemplate::parse("{{ raise_exception('no') }}");
  ASSERT_TRUE(tmpl);
  const chat::MessageForms forms = chat::probe_message_forms(*tmpl);
  EXPECT_TRUE(forms.object_arguments);
  EXPECT_TRUE(forms.parts_roles.empty());
}

}  // namespace
}  // namespace sluice::server
