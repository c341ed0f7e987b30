#include "bench/workload.h"

#include <algorithm>
#include <charconv>
#include <deque>

#include "bench/arrivals.h"
#include "common/check.h"

namespace sluice::bench {
namespace {

// Common English words for text prompts: most are one token with a leading space in the
// vocabularies of current models, so N words make a prompt of about N tokens.
constexpr std::string_view kWords[] = {
    "the",    "of",     "and",    "to",     "in",     "is",     "you",    "that",   "it",     "he",
    "was",    "for",    "on",     "are",    "as",     "with",   "his",    "they",   "at",     "be",
    "this",   "have",   "from",   "or",     "one",    "had",    "by",     "word",   "but",    "not",
    "what",   "all",    "were",   "we",     "when",   "your",   "can",    "said",   "there",  "use",
    "an",     "each",   "which",  "she",    "do",     "how",    "their",  "if",     "will",   "up",
    "other",  "about",  "out",    "many",   "then",   "them",   "these",  "so",     "some",   "her",
    "would",  "make",   "like",   "him",    "into",   "time",   "has",    "look",   "two",    "more",
    "write",  "go",     "see",    "number", "no",     "way",    "could",  "people", "my",     "than",
    "first",  "water",  "been",   "call",   "who",    "oil",    "its",    "now",    "find",   "long",
    "down",   "day",    "did",    "get",    "come",   "made",   "may",    "part",   "over",   "new",
    "sound",  "take",   "only",   "little", "work",   "know",   "place",  "year",   "live",   "me",
    "back",   "give",   "most",   "very",   "after",  "thing",  "our",    "just",   "name",   "good",
    "man",    "think",  "say",    "great",  "where",  "help",   "through", "much",  "before", "line",
    "right",  "too",    "mean",   "old",    "any",    "same",   "tell",   "boy",    "follow", "came",
    "want",   "show",   "also",   "around", "form",   "three",  "small",  "set",    "put",    "end",
    "does",   "another", "well",  "large",  "must",   "big",    "even",   "such",   "because", "turn",
    "here",   "why",    "ask",    "went",   "men",    "read",   "need",   "land",   "different", "home",
    "us",     "move",   "try",    "kind",   "hand",   "picture", "again", "change", "off",    "play",
    "spell",  "air",    "away",   "animal", "house",  "point",  "page",   "letter", "mother", "answer",
    "found",  "study",  "still",  "learn",  "should", "world",  "high",   "every",  "near",   "add",
    "food",   "between", "own",   "below",  "country", "plant", "last",   "school", "father", "keep",
    "tree",   "never",  "start",  "city",   "earth",  "eye",    "light",  "thought", "head",  "under",
    "story",  "saw",    "left",   "few",    "while",  "along",  "might",  "close",  "something", "seem",
    "next",   "hard",   "open",   "example", "begin", "life",   "always", "those",  "both",   "paper",
    "together", "got",  "group",  "often",  "run",    "important", "until", "children", "side", "feet",
};

struct Prompt {
  std::vector<int32_t> token_ids;
  std::string text;
};

Prompt random_prompt(const WorkloadConfig& c, std::mt19937_64& rng, int32_t length) {
  Prompt p;
  if (c.prompt_format == PromptFormat::kTokens) {
    p.token_ids.resize(length);
    for (int32_t& id : p.token_ids) id = static_cast<int32_t>(uniform_int(rng, c.token_id_min, c.token_id_max - 1));
  } else {
    p.text = random_words(rng, length);
  }
  return p;
}

// A request whose prompt is `prefix` then `question` (either may be empty).
RequestSpec make_spec(const WorkloadConfig& c, const Prompt& prefix, Prompt question, int32_t num_prompt_tokens,
                      int32_t max_tokens) {
  RequestSpec spec;
  spec.max_tokens = max_tokens;
  spec.num_prompt_tokens = num_prompt_tokens;
  if (c.api == Api::kChat) {
    if (!prefix.text.empty()) spec.messages.push_back({"system", prefix.text});
    spec.messages.push_back({"user", std::move(question.text)});
  } else if (c.prompt_format == PromptFormat::kTokens) {
    spec.prompt_token_ids = prefix.token_ids;
    spec.prompt_token_ids.insert(spec.prompt_token_ids.end(), question.token_ids.begin(), question.token_ids.end());
  } else {
    spec.prompt_text = prefix.text.empty() ? std::move(question.text) : prefix.text + "\n\n" + question.text;
  }
  return spec;
}

class RandomWorkload : public Workload {
 public:
  explicit RandomWorkload(const WorkloadConfig& c) : config_(c), rng_(c.seed) {}

  std::optional<RequestSpec> next() override {
    const int32_t length = config_.prompt_tokens.sample(rng_);
    const int32_t max_tokens = config_.output_tokens.sample(rng_);
    return make_spec(config_, {}, random_prompt(config_, rng_, length), length, max_tokens);
  }
  bool exhausted() const override { return false; }
  std::optional<int64_t> size() const override { return std::nullopt; }

 private:
  WorkloadConfig config_;
  std::mt19937_64 rng_;
};

class SharedPrefixWorkload : public Workload {
 public:
  explicit SharedPrefixWorkload(const WorkloadConfig& c) {
    std::mt19937_64 rng(c.seed);
    for (int32_t p = 0; p < c.num_prefixes; ++p) {
      const Prompt prefix = random_prompt(c, rng, c.prefix_tokens);
      for (int32_t q = 0; q < c.num_questions; ++q) {
        const int32_t length = c.prompt_tokens.sample(rng);
        const int32_t max_tokens = c.output_tokens.sample(rng);
        RequestSpec spec = make_spec(c, prefix, random_prompt(c, rng, length), c.prefix_tokens + length, max_tokens);
        spec.prefix_idx = p;
        specs_.push_back(std::move(spec));
      }
    }
    // Fisher-Yates with our own draws (see arrivals.h): every prefix recurs throughout the run.
    for (size_t i = specs_.size(); i > 1; --i) {
      std::swap(specs_[i - 1], specs_[static_cast<size_t>(uniform_int(rng, 0, static_cast<int64_t>(i) - 1))]);
    }
  }

  std::optional<RequestSpec> next() override {
    if (next_idx_ == specs_.size()) return std::nullopt;
    return std::move(specs_[next_idx_++]);
  }
  bool exhausted() const override { return next_idx_ == specs_.size(); }
  std::optional<int64_t> size() const override { return static_cast<int64_t>(specs_.size()); }

 private:
  std::vector<RequestSpec> specs_;
  size_t next_idx_ = 0;
};

class ChatWorkload : public Workload {
 public:
  explicit ChatWorkload(const WorkloadConfig& c) : sessions_(c.num_sessions), num_turns_(c.num_turns) {
    std::mt19937_64 rng(c.seed);
    for (int32_t s = 0; s < c.num_sessions; ++s) {
      for (int32_t t = 0; t < c.num_turns; ++t) {
        const int32_t length = c.prompt_tokens.sample(rng);
        sessions_[s].user_turns.push_back(random_words(rng, length));
        sessions_[s].turn_lengths.push_back(length);
        sessions_[s].max_tokens.push_back(c.output_tokens.sample(rng));
      }
      ready_.push_back(s);
    }
  }

  std::optional<RequestSpec> next() override {
    if (ready_.empty()) return std::nullopt;
    const int32_t s = ready_.front();
    ready_.pop_front();
    Session& session = sessions_[s];
    const int32_t t = session.next_turn;
    session.prompt_words += session.turn_lengths[t];
    RequestSpec spec;
    spec.messages = session.history;
    spec.messages.push_back({"user", session.user_turns[t]});
    spec.max_tokens = session.max_tokens[t];
    spec.num_prompt_tokens = session.prompt_words;
    spec.session_idx = s;
    spec.turn_idx = t;
    spec.user = fmt::format("session-{}", s);
    ++num_busy_;
    return spec;
  }

  void complete(const RequestSpec& spec, const std::string* answer) override {
    SLUICE_CHECK(spec.session_idx >= 0 && spec.session_idx < static_cast<int32_t>(sessions_.size()));
    Session& session = sessions_[spec.session_idx];
    --num_busy_;
    // NOTE: a failed turn ends its session: the next turn's history would need an answer that
    // never came, and inventing one would send a conversation no user had.
    if (answer == nullptr) return;
    session.history.push_back({"user", session.user_turns[spec.turn_idx]});
    session.history.push_back({"assistant", *answer});
    session.prompt_words += static_cast<int32_t>(std::count(answer->begin(), answer->end(), ' ')) + 1;
    // The session's next turn goes first in line, so that sessions run through one after another
    // rather than all first turns before any second one.
    if (++session.next_turn < num_turns_) ready_.push_front(spec.session_idx);
  }

  bool exhausted() const override { return ready_.empty() && num_busy_ == 0; }
  std::optional<int64_t> size() const override { return static_cast<int64_t>(sessions_.size()) * num_turns_; }

 private:
  struct Session {
    std::vector<std::string> user_turns;  // [num_turns]
    std::vector<int32_t> turn_lengths;    // [num_turns] words of each user turn
    std::vector<int32_t> max_tokens;      // [num_turns]
    std::vector<ChatMessage> history;     // the turns answered so far, user and assistant
    int32_t next_turn = 0;
    int32_t prompt_words = 0;  // words of the history and the turn being sent
  };
  std::vector<Session> sessions_;
  int32_t num_turns_;
  std::deque<int32_t> ready_;  // sessions whose next turn can be sent
  int32_t num_busy_ = 0;       // sessions with a turn in flight
};

}  // namespace

int32_t LengthRange::sample(std::mt19937_64& rng) const {
  return min == max ? min : static_cast<int32_t>(uniform_int(rng, min, max));
}

std::string LengthRange::to_string() const { return min == max ? fmt::format("{}", min) : fmt::format("{}:{}", min, max); }

Result<LengthRange> parse_length_range(std::string_view text) {
  auto parse = [](std::string_view s, int32_t& out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 1 && out <= 1'000'000;
  };
  LengthRange r;
  const size_t colon = text.find(':');
  const bool ok = colon == std::string_view::npos
                      ? parse(text, r.min) && parse(text, r.max)
                      : parse(text.substr(0, colon), r.min) && parse(text.substr(colon + 1), r.max) && r.min <= r.max;
  if (!ok) {
    return Error(StatusCode::kInvalid, "'{}' is not a length N or a range MIN:MAX with 1 <= MIN <= MAX <= 1000000",
                 text);
  }
  return r;
}

std::string_view workload_name(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kRandom: return "random";
    case WorkloadKind::kSharedPrefix: return "shared-prefix";
    case WorkloadKind::kChat: return "chat";
  }
  return "?";
}

std::string_view api_name(Api api) { return api == Api::kChat ? "chat" : "completions"; }

std::string_view prompt_format_name(PromptFormat format) { return format == PromptFormat::kTokens ? "tokens" : "text"; }

Status validate(const WorkloadConfig& c) {
  if (c.kind == WorkloadKind::kChat && c.api != Api::kChat) {
    return Status::error("the chat workload sends conversations: it needs --api chat", StatusCode::kInvalid);
  }
  if (c.api == Api::kChat && c.prompt_format == PromptFormat::kTokens) {
    return Status::error("token-id prompts need --api completions; use --prompt-format text with --api chat",
                         StatusCode::kInvalid);
  }
  if (c.token_id_min < 0 || c.token_id_min >= c.token_id_max) {
    return Status::error(fmt::format("--token-range {}:{} must satisfy 0 <= LO < HI", c.token_id_min, c.token_id_max),
                         StatusCode::kInvalid);
  }
  if (c.num_prefixes < 1 || c.num_questions < 1 || c.prefix_tokens < 1) {
    return Status::error("--prefixes, --questions and --prefix-tokens must be at least 1", StatusCode::kInvalid);
  }
  if (c.num_sessions < 1 || c.num_turns < 1) {
    return Status::error("--sessions and --turns must be at least 1", StatusCode::kInvalid);
  }
  return Status::ok();
}

std::unique_ptr<Workload> make_workload(const WorkloadConfig& config) {
  SLUICE_CHECK(validate(config).is_ok()) << validate(config).message();
  switch (config.kind) {
    case WorkloadKind::kRandom: return std::make_unique<RandomWorkload>(config);
    case WorkloadKind::kSharedPrefix: return std::make_unique<SharedPrefixWorkload>(config);
    case WorkloadKind::kChat: return std::make_unique<ChatWorkload>(config);
  }
  return nullptr;
}

std::string random_words(std::mt19937_64& rng, int32_t num_words) {
  constexpr int64_t kNumWords = static_cast<int64_t>(std::size(kWords));
  std::string s;
  for (int32_t i = 0; i < num_words; ++i) {
    if (i > 0) s += ' ';
    s += kWords[uniform_int(rng, 0, kNumWords - 1)];
  }
  return s;
}

}  // namespace sluice::bench
