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
// GPT-2's without the final \s+ (as llama.cpp gives MPT, OLMo, StarCoder...: whitespace the
// lookahead leaves stays a fragment of its own either way).
constexpr std::string_view kGpt2LookaheadRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// DeepSeek LLM (deepseek-ai/deepseek-llm-7b-base, tokenizer.json: a Sequence of Split
// pre-tokenizers, each Isolated): newlines alone, runs of letters of the Latin, Greek, Cyrillic,
// Armenian, Georgian, Cherokee... blocks (the class below, as published, written with code points),
// ASCII and full-width punctuation, trailing white space, CJK ideographs and Hangul, digits.
constexpr std::string_view kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr std::string_view kDeepseekPunct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr std::string_view kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// DeepSeek V3 (deepseek-ai/DeepSeek-V3 tokenizer.json): digits in 1..3, CJK ideographs and kana,
// then a Llama-3-like split where letters take marks and punctuation/symbols go together.
constexpr std::string_view kDeepseekV3Cjk = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr std::string_view kDeepseekV3Regex =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// GPT-4o (tiktoken's o200k_base pattern, as in its tokenizer.json): words split before capitals,
// contractions attached, digits in 1..3.
constexpr std::string_view kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Tekken (Mistral NeMo's tokenizer.json): GPT-4o's split without contractions, single digits.
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Falcon (tiiuae/falcon-7b tokenizer.json: Punctuation, ByteLevel, Digits), as llama.cpp writes
// it: punctuation runs, the GPT-2 split, then digits in threes.
constexpr std::string_view kFalconPunct = R"([\p{P}\$\+<=>\^~\|`]+)";
constexpr std::string_view kThreeDigits = R"([0-9][0-9][0-9])";
// Chameleon (facebook/chameleon-7b tokenizer.json): sentinel and image tokens whole, tabs,
// newlines and runs of 2 or 4 spaces, single digits, single punctuation, then GPT-2's split.
constexpr std::string_view kChameleonSentinel = R"(<sentinel:[0-9]+>)";
constexpr std::string_view kChameleonImage = R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)";
constexpr std::string_view kChameleonSpaces = R"(([\t\n]|    |  ))";
constexpr std::string_view kChameleonPunct = R"([\p{P}!-/:-@\[-`{-~])";

struct PreTokenizerSpec {
  std::string_view name;
  std::vector<std::string_view> regexes;
};

// Name aliases follow llama.cpp's mapping of tokenizer.ggml.pre values to regex sets.
std::optional<PreTokenizerSpec> find_spec(std::string_view pre) {
  static constexpr std::array<std::string_view, 5> kGpt2Names = {"default", "gpt2", "gpt-2", "olmo", "mpt"};
  static constexpr std::array<std::string_view, 3> kLlama3Names = {"llama-bpe", "llama3", "llama-v3"};
  static constexpr std::array<std::string_view, 2> kQwen2Names = {"qwen2", "deepseek-r1-qwen"};
  static constexpr std::array<std::string_view, 8> kSmollmNames = {
      "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva", "minerva-7b"};
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
  if (pre == "deepseek-llm") {
    return PreTokenizerSpec{"deepseek-llm", {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk,
                                             R"(\p{N}+)"}};
  }
  if (pre == "deepseek-coder") {
    return PreTokenizerSpec{"deepseek-coder", {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, kDigitRegex}};
  }
  if (pre == "deepseek-v3") return PreTokenizerSpec{"deepseek-v3", {R"(\p{N}{1,3})", kDeepseekV3Cjk, kDeepseekV3Regex}};
  if (pre == "falcon") return PreTokenizerSpec{"falcon", {kFalconPunct, kGpt2LookaheadRegex, kThreeDigits}};
  if (pre == "gpt-4o") return PreTokenizerSpec{"gpt-4o", {kGpt4oRegex}};
  if (pre == "tekken") return PreTokenizerSpec{"tekken", {kTekkenRegex}};
  if (pre == "chameleon") {
    return PreTokenizerSpec{"chameleon", {kChameleonSentinel, kChameleonImage, kChameleonSpaces, kDigitRegex,
                                          kChameleonPunct, kGpt2LookaheadRegex}};
  }
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
  return {"default", "gpt2", "gpt-2", "olmo", "mpt", "llama-bpe", "llama3", "llama-v3", "qwen2",
          "deepseek-r1-qwen", "smollm", "starcoder", "refact", "command-r", "codeshell",
          "exaone", "minerva", "minerva-7b", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "gpt-4o",
          "tekken", "chameleon"};
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
