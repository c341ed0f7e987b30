#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <memory>
#include <optional>

namespace sluice {
namespace {

// The regexes, as published with each model's tokenizer.json (Hugging Face tokenizers).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDigitRegex = R"(\p{N})";

struct PreTokenizerSpec {
  std::string_view name;
  std::vector<std::string_view> regexes;
};

// Name aliases follow llama.cpp's mapping of tokenizer.ggml.pre values to regex sets.
std::optional<PreTokenizerSpec> find_spec(std::string_view pre) {
  static constexpr std::array<std::string_view, 4> kGpt2Names = {"default", "gpt2", "gpt-2", "olmo"};
  static constexpr std::array<std::string_view, 3> kLlama3Names = {"llama-bpe", "llama3", "llama-v3"};
  static constexpr std::array<std::string_view, 2> kQwen2Names = {"qwen2", "deepseek-r1-qwen"};
  static constexpr std::array<std::string_view, 7> kSmollmNames = {
      "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"};
  auto in = [pre](const auto& names) {
    for (std::string_view n : names) {
      if (n == pre) return true;
    }
    return false;
  };
  if (in(kGpt2Names)) return PreTokenizerSpec{"gpt2", {kGpt2Regex}};
  if (in(kLlama3Names)) return PreTokenizerSpec{"llama3", {kLlama3Regex}};
  if (in(kQwen2Names)) return PreTokenizerSpec{"qwen2", {kQwen2Regex}};
  if (in(kSmollmNames)) return PreTokenizerSpec{"smollm", {kDigitRegex, kGpt2Regex}};
  return std::nullopt;
}

// PCRE2's \s under UCP is Unicode's Z categories plus \t\n\v\f\r; the tokenizers these
// regexes come from (Oniguruma) also count U+0085 NEXT LINE as white space. Rewrites \s and
// \S so that they agree: \s -> [\s\x{85}] (or \s\x{85} inside a class), \S -> [^\s\x{85}].
std::string widen_whitespace(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      } else if (next == 'S' && !in_class) {
        out += R"([^\s\x{85}])";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

std::vector<std::string_view> supported_pretokenizer_names() {
  return {"default", "gpt2", "gpt-2", "olmo", "llama-bpe", "llama3", "llama-v3", "qwen2",
          "deepseek-r1-qwen", "smollm", "starcoder", "refact", "command-r", "codeshell",
          "exaone", "minerva"};
}

Result<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  std::optional<PreTokenizerSpec> spec = find_spec(pre);
  if (!spec) {
    std::string names;
    for (std::string_view n : supported_pretokenizer_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
    return Error("unsupported pre-tokenizer '{}' (supported: {})", pre, names);
  }
  PreTokenizer result;
  result.name_ = std::string(spec->name);
  for (std::string_view source : spec->regexes) {
    const std::string pattern = widen_whitespace(source);
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (!regex->code) {
      return Error("pre-tokenizer '{}': regex does not compile at offset {}: {}", pre,
                   error_offset, pcre2_message(error_code));
    }
    // NOTE: JIT is an optimisation only; without it (unsupported platform) matching still works.
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    result.regexes_.push_back(std::move(regex));
  }
  return result;
}

Result<std::vector<std::string_view>> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> fragments;
  if (!text.empty()) fragments.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& regex : regexes_) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(regex->code, nullptr), &pcre2_match_data_free);
    next.clear();
    for (std::string_view fragment : fragments) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(fragment.data());
      size_t offset = 0;    // where the next search starts
      size_t emitted = 0;   // end of the last fragment pushed
      while (offset < fragment.size()) {
        const int rc = pcre2_match(regex->code, subject, fragment.size(), offset,
                                   PCRE2_NO_UTF_CHECK, match.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return Error("pre-tokenizer '{}': regex match failed: {}", name_, pcre2_message(rc));
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t start = ovector[0];
        const size_t end = ovector[1];
        if (end == start) {
          // An empty match splits nothing; step over one whole UTF-8 character.
          offset = start + 1;
          while (offset < fragment.size() && (static_cast<uint8_t>(fragment[offset]) & 0xC0) == 0x80) ++offset;
          continue;
        }
        if (start > emitted) next.push_back(fragment.substr(emitted, start - emitted));
        next.push_back(fragment.substr(start, end - start));
        emitted = offset = end;
      }
      if (emitted < fragment.size()) next.push_back(fragment.substr(emitted));
    }
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace sluice
