// sluice tokenize: token ids of a text, for any GGUF with a vocabulary (vocabulary-only files too).
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "common/utf8.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

struct TokenizeOptions {
  std::string model = "demo";
  std::string text;
  bool pieces = false;
  bool no_bos = false;
  bool special = false;
};

// Shows a piece on one line as valid UTF-8: control characters and bytes that are not part
// of a complete UTF-8 character (byte-fallback tokens) are escaped as \n, \t, \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      Utf8Char ch = utf8_decode(std::string_view(s).substr(i));
      if (ch.status == Utf8Status::kValid) {
        out.append(s, i, ch.length);
        i += ch.length;
      } else {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      }
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
    ++i;
  }
  return out;
}

int run(const TokenizeOptions& o) {
  std::string text = o.text;
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  auto file = open_gguf(o.model);
  if (!file) return fail(file.error().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return fail(tok.error().with_context(o.model).message());
  auto ids = (*tok)->encode(text, {.add_bos = !o.no_bos, .parse_special = o.special});
  if (!ids) return fail(ids.error().message());
  if (o.pieces) {
    for (int32_t id : *ids) {
      std::printf("%d\t'%s'\t%s\n", id, printable((*tok)->token_to_piece(id, true)).c_str(),
                  printable((*tok)->token_text(id)).c_str());
    }
  } else {
    for (size_t i = 0; i < ids->size(); ++i) std::printf("%s%d", i ? " " : "", (*ids)[i]);
    std::printf("\n");
  }
  return finish_stdout();
}

}  // namespace

CommandFn add_tokenize_command(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (works on vocabulary-only GGUF files)");
  cmd->add_option("-m,--model", o->model, "GGUF file with a tokenizer, or 'demo'")->capture_default_str();
  cmd->add_option("text", o->text, "Text to tokenize; '-' reads standard input")->required();
  cmd->add_flag("--pieces", o->pieces, "One token per line: id, the bytes it stands for, its vocabulary entry");
  cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token the vocabulary asks for");
  cmd->add_flag("--special", o->special, "Parse special tokens such as <|im_start|> in the text");
  return [o] { return run(*o); };
}

}  // namespace sluice::cli
