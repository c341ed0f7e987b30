// Workloads: what requests the load generator sends, and in which order.
//
//   random         independent prompts with lengths drawn from --prompt-tokens, outputs from
//                  --output-tokens; no two prompts share a prefix worth caching. Unbounded.
//   shared-prefix  N long system prompts ("prefixes") x M questions each, all N*M pairs in a
//                  seeded shuffled order: a server with prefix caching computes each prefix once.
//   chat           S sessions x T turns; each turn resends the whole conversation so far, the
//                  server's actual answers included, and names its session in the "user" field.
//                  A session's next turn is ready only when the previous one has been answered.
//
// Prompts are token ids (random ids from a range, an exact prompt length for /v1/completions)
// or text (random common English words, about one token each in most vocabularies; the server's
// usage.prompt_tokens tells the real count). Everything is drawn from --seed, so a seed gives the
// same requests in the same order; only which connection sends which depends on timing.
//
// Not thread-safe: the runner calls it from its one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sluice::bench {

// A length drawn uniformly from [min, max]; min == max is a fixed length.
struct LengthRange {
  int32_t min = 128;
  int32_t max = 128;
  int32_t sample(std::mt19937_64& rng) const;
  std::string to_string() const;  // "128" or "64:256"
};
// Parses "N" or "MIN:MAX" (1 <= MIN <= MAX <= 1000000).
Result<LengthRange> parse_length_range(std::string_view text);

enum class WorkloadKind { kRandom, kSharedPrefix, kChat };
enum class Api { kCompletions, kChat };     // /v1/completions or /v1/chat/completions
enum class PromptFormat { kTokens, kText };  // token ids (completions only) or words

std::string_view workload_name(WorkloadKind kind);  // "random", "shared-prefix", "chat"
std::string_view api_name(Api api);                 // "completions", "chat"
std::string_view prompt_format_name(PromptFormat format);

struct WorkloadConfig {
  WorkloadKind kind = WorkloadKind::kRandom;
  Api api = Api::kCompletions;
  PromptFormat prompt_format = PromptFormat::kTokens;
  LengthRange prompt_tokens;  // random: the prompt; shared-prefix: the question; chat: each user turn
  LengthRange output_tokens;  // max_tokens of each request
  // Token-id prompts draw ids uniformly from [token_id_min, token_id_max).
  int32_t token_id_min = 100;
  int32_t token_id_max = 4000;
  int32_t num_prefixes = 4;     // shared-prefix
  int32_t num_questions = 16;   // shared-prefix: questions per prefix
  int32_t prefix_tokens = 512;  // shared-prefix: length of each prefix
  int32_t num_sessions = 8;     // chat
  int32_t num_turns = 4;        // chat
  uint64_t seed = 0;
};

// Says what is wrong with a configuration, in terms of the command's flags.
Status validate(const WorkloadConfig& config);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// One request to send. Exactly one of the prompt forms is set, by api and prompt format.
struct RequestSpec {
  std::vector<int32_t> prompt_token_ids;  // completions, token prompt: [num_prompt_tokens]
  std::string prompt_text;                // completions, text prompt
  std::vector<ChatMessage> messages;      // chat API
  int32_t max_tokens = 0;
  int32_t num_prompt_tokens = 0;  // as generated: exact for token ids, a word count for text
  int32_t prefix_idx = -1;        // shared-prefix: which prefix
  int32_t session_idx = -1;       // chat: which session (its id is "session-<idx>")
  int32_t turn_idx = -1;          // chat: which turn of the session, from 0
  std::string user;               // sent as the "user" field when not empty
};

class Workload {
 public:
  virtual ~Workload() = default;
  // The next request ready to send, or nullopt when none is ready now; exhausted() says whether
  // one ever will be.
  virtual std::optional<RequestSpec> next() = 0;
  // Called when a request from next() has ended: with its answer text when it succeeded, with
  // nullptr when it failed.
  virtual void complete(const RequestSpec& spec, const std::string* answer) {
    (void)spec;
    (void)answer;
  }
  virtual bool exhausted() const = 0;
  // How many requests it holds in all, or nullopt when it never runs out.
  virtual std::optional<int64_t> size() const = 0;
};

// REQUIRES: validate(config) is ok.
std::unique_ptr<Workload> make_workload(const WorkloadConfig& config);

// `num_words` random common English words separated by spaces.
std::string random_words(std::mt19937_64& rng, int32_t num_words);

}  // namespace sluice::bench
