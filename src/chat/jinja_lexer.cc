// The lexer walks the source once. In text it looks for the next "{{", "{%" or "{#"; the
// text before it is emitted after the stripping rules of that tag (`-`, lstrip_blocks) are
// applied. Inside a tag it emits names, literals and operators until the closing delimiter,
// then applies the rules of the closing side (`-`, trim_blocks) to the text that follows.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "chat/jinja_status.h"
#include "common/utf8.h"

namespace sluice::chat {

std::string line_column(std::string_view source, size_t pos) {
  pos = std::min(pos, source.size());
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < pos; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return fmt::format("line {}, column {}", line, pos - line_start + 1);
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string normalise_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python string-literal escapes (jinja2 decodes literals with "unicode-escape"); an unknown
// escape keeps its backslash, as Python does.
std::string decode_escapes(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case 'n': out.push_back('\n'); break;
      case 't': out.push_back('\t'); break;
      case 'r': out.push_back('\r'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'v': out.push_back('\v'); break;
      case 'a': out.push_back('\a'); break;
      case '0': out.push_back('\0'); break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case '\n': break;  // line continuation
      case 'x':
      case 'u':
      case 'U': {
        const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + width < body.size();
        for (size_t k = 1; ok && k <= width; ++k) {
          const int h = hex_value(body[i + k]);
          if (h < 0) ok = false;
          cp = cp * 16 + static_cast<uint32_t>(std::max(h, 0));
        }
        if (!ok) {
          out.push_back('\\');
          out.push_back(e);
          break;
        }
        utf8_append(static_cast<char32_t>(cp), out);
        i += width;
        break;
      }
      default:
        out.push_back('\\');
        out.push_back(e);
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  Result<LexedTemplate> run() {
    bool line_starting = true;  // the text about to be read begins a line
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text), pos_);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (modifier == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && modifier != '+') {
        lstrip_line(text, line_starting);
      }
      const size_t text_pos = pos_;
      pos_ = tag + 2 + ((modifier == '-' || (modifier == '+' && kind != '{')) ? 1 : 0);
      if (kind == '%' && is_raw_begin()) {
        emit_text(std::move(text), text_pos);
        SLUICE_RETURN_IF_ERROR(lex_raw(tag));
      } else {
        emit_text(std::move(text), text_pos);
        if (kind == '#') {
          SLUICE_RETURN_IF_ERROR(skip_comment(tag));
        } else {
          SLUICE_RETURN_IF_ERROR(lex_tag(kind, tag));
        }
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::kEof, "", src_.size()});
    return LexedTemplate{std::move(src_), std::move(tokens_)};
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // lstrip_blocks: drop spaces/tabs between the line start and the tag.
  static void lstrip_line(std::string& text, bool line_starting) {
    const size_t nl = text.rfind('\n');
    const size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !line_starting) return;
    for (size_t i = line_begin; i < text.size(); ++i) {
      if (text[i] != ' ' && text[i] != '\t') return;
    }
    text.resize(line_begin);
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back(Token{TokenKind::kText, std::move(text), at});
  }

  // After a closing delimiter: `-` strips all whitespace, trim_blocks drops one newline.
  void after_close(char close_modifier, bool trim_newline) {
    if (close_modifier == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    } else if (trim_newline && close_modifier != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  Status skip_comment(size_t tag) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return error_at(tag, "unterminated comment");
    const char modifier = end > pos_ && src_[end - 1] == '-' ? '-' : (end > pos_ && src_[end - 1] == '+' ? '+' : '\0');
    pos_ = end + 2;
    after_close(modifier, /*trim_newline=*/true);
    return Status::ok();
  }

  // At pos_ (just after "{%" and its modifier): is this `raw %}`?
  bool is_raw_begin() const {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    return true;
  }

  Status lex_raw(size_t tag) {
    pos_ = src_.find("raw", pos_) + 3;
    while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
    char open_close = '\0';
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) open_close = src_[pos_++];
    if (src_.compare(pos_, 2, "%}") != 0) return error_at(tag, "expected '%}' after 'raw'");
    pos_ += 2;
    if (open_close == '-') after_close('-', false);
    // Find "{%[-+]? endraw [-+]?%}".
    for (size_t search = pos_;;) {
      const size_t start = src_.find("{%", search);
      if (start == std::string::npos) return error_at(tag, "missing '{% endraw %}'");
      size_t p = start + 2;
      const char begin_mod = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : '\0';
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = start + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      const char end_mod = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : '\0';
      if (src_.compare(p, 2, "%}") != 0) {
        search = start + 2;
        continue;
      }
      std::string body = src_.substr(pos_, start - pos_);
      if (begin_mod == '-') {
        while (!body.empty() && is_space(body.back())) body.pop_back();
      }
      emit_text(std::move(body), pos_);
      pos_ = p + 2;
      after_close(end_mod, /*trim_newline=*/true);
      return Status::ok();
    }
  }

  Status lex_tag(char kind, size_t tag) {
    const bool is_var = kind == '{';
    tokens_.push_back(Token{is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", tag});
    int depth = 0;  // open ( [ { inside the tag: "}}" closes a dict there, not the tag
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return error_at(tag, is_var ? "missing '}}'" : "missing '%}'");
      const char close = is_var ? '}' : '%';
      char modifier = '\0';
      size_t p = pos_;
      if ((src_[p] == '-' || (src_[p] == '+' && !is_var)) && p + 1 < src_.size() && src_[p + 1] == close) {
        modifier = src_[p++];
      }
      if (depth == 0 && src_.compare(p, 2, is_var ? "}}" : "%}") == 0) {
        tokens_.push_back(Token{is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", pos_});
        pos_ = p + 2;
        after_close(modifier, /*trim_newline=*/!is_var);
        return Status::ok();
      }
      SLUICE_CHAT_RETURN_IF_ERROR(lex_one(depth));
    }
  }

  Status lex_one(int& depth) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (c == '\'' || c == '"') {
      size_t p = pos_ + 1;
      while (p < src_.size() && src_[p] != c) p += src_[p] == '\\' ? 2 : 1;
      if (p >= src_.size()) return error_at(start, "unterminated string");
      tokens_.push_back(Token{TokenKind::kString, decode_escapes(std::string_view(src_).substr(pos_ + 1, p - pos_ - 1)), start});
      pos_ = p + 1;
      return Status::ok();
    }
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t p = pos_;
      while (p < src_.size() && is_name_char(src_[p])) ++p;
      tokens_.push_back(Token{TokenKind::kName, src_.substr(pos_, p - pos_), start});
      pos_ = p;
      return Status::ok();
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::kOperator, std::string(op), start});
        pos_ += 2;
        return Status::ok();
      }
    }
    if (std::string_view("+-*/%~<>=()[]{},.:|;").find(c) == std::string_view::npos) {
      return error_at(start, fmt::format("unexpected character '{}'", c == '\0' ? std::string("\\0") : std::string(1, c)));
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    tokens_.push_back(Token{TokenKind::kOperator, std::string(1, c), start});
    ++pos_;
    return Status::ok();
  }

  Status lex_number() {
    const size_t start = pos_;
    auto digits = [&](std::string& out) {
      while (pos_ < src_.size() && (is_digit(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() && is_digit(src_[pos_ + 1])))) {
        if (src_[pos_] != '_') out.push_back(src_[pos_]);
        ++pos_;
      }
    };
    std::string text;
    digits(text);
    // After "." (x.0) only an integer follows, as jinja2's float rule requires.
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().value == ".";
    bool is_float = false;
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && is_digit(src_[pos_ + 1])) {
      is_float = true;
      text.push_back('.');
      ++pos_;
      digits(text);
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        is_float = true;
        text.append(src_, pos_, p - pos_);
        pos_ = p;
        digits(text);
      }
    }
    tokens_.push_back(Token{is_float ? TokenKind::kFloat : TokenKind::kInt, std::move(text), start});
    return Status::ok();
  }

  Status error_at(size_t pos, std::string_view message) const {
    return Status::error(fmt::format("chat template syntax error at {}: {}", line_column(src_, pos), message));
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

Result<LexedTemplate> lex_template(std::string_view source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace sluice::chat
