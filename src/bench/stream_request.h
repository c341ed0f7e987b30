// One streamed request to an OpenAI-compatible server, timed: the body it sends, the reading of
// its server-sent events, and the record the report is made of.
//
// Every request asks for a stream ("stream": true) with usage in the last chunk
// ("stream_options": {"include_usage": true}). A *token chunk* is an event whose first choice
// carries non-empty text (completions: choices[0].text; chat: choices[0].delta.content or
// reasoning_content): the role-only first chunk of a chat stream, the finish chunk and the usage
// chunk carry no token and are not timed.
//   time to first token (TTFT) = request sent -> first token chunk read
//   inter-token latency (ITL)  = the gaps between consecutive token chunks (per chunk: a server
//                                that packs several tokens in a chunk shows fewer, longer gaps)
//   time per output token      = (end to end - TTFT) / (output tokens - 1)
//   end to end (E2E)           = request sent -> last byte of the response read
// The clock starts before the connection is made when there is none open, as a client sees it.
// Output tokens come from usage.completion_tokens, else from the number of token chunks.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "bench/workload.h"
#include "common/http_client.h"

namespace sluice::bench {

using Clock = std::chrono::steady_clock;

// What every request of a run shares.
struct ApiSettings {
  http::Url url;  // the API root: endpoints are url.target("/completions") etc.
  Api api = Api::kCompletions;
  std::string model;
  std::string api_key;  // sent as "Authorization: Bearer KEY" when not empty
  bool ignore_eos = true;
  double temperature = 0;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every body, last
};

struct RequestRecord {
  int64_t request_idx = 0;  // order of sending within the run, from 0
  int32_t prefix_idx = -1;
  int32_t session_idx = -1;
  int32_t turn_idx = -1;
  int32_t max_tokens = 0;
  int32_t expected_prompt_tokens = 0;  // RequestSpec::num_prompt_tokens
  double start_s = 0;                  // when it was sent, seconds since the run started
  double ttft_s = -1;                  // -1: no token chunk arrived
  double e2e_s = 0;
  std::vector<double> itl_s;  // [num_token_chunks - 1]
  int32_t num_token_chunks = 0;
  int32_t prompt_tokens = -1;  // usage.prompt_tokens; -1: not reported
  int32_t output_tokens = 0;   // usage.completion_tokens, else num_token_chunks
  bool output_tokens_from_usage = false;
  int32_t cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens; -1: not reported
  std::string finish_reason;
  bool ok = false;
  std::string error_kind;  // connect, timeout, closed, protocol, cancelled, http_429..., stream_error, bad_stream
  std::string error;       // the message, for a person

  // TPOT in seconds, or -1 when fewer than two tokens or no TTFT.
  double tpot_s() const;
};

nlohmann::json record_json(const RequestRecord& r);

// The JSON body for `spec`.
nlohmann::json request_body(const ApiSettings& settings, const RequestSpec& spec);

struct Usage {
  int32_t prompt_tokens = -1;
  int32_t completion_tokens = -1;
  int32_t cached_tokens = -1;  // -1: absent
};

// What one "data:" event of a stream says.
struct StreamChunk {
  std::string text;  // the token text of the first choice
  std::string finish_reason;
  std::optional<Usage> usage;
  std::string error;  // the server reported an error in the stream
};
Result<StreamChunk> parse_stream_chunk(std::string_view data, Api api);

struct RequestOutcome {
  RequestRecord record;
  std::string answer;  // the generated text
};

// Sends `spec`, reads its stream and times it from `start` (when it was admitted: building
// its body counts in its latency); never fails: failures are in the record. `run_start` is
// the zero of RequestRecord::start_s.
boost::asio::awaitable<RequestOutcome> send_request(http::HttpConnection& connection, const ApiSettings& settings,
                                                    const RequestSpec& spec, Clock::time_point run_start,
                                                    Clock::time_point start);

}  // namespace sluice::bench
