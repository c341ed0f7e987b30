// FakeOpenAi: a fake OpenAI-compatible server for tests of the load generator: a real HTTP
// server on 127.0.0.1 and an ephemeral port (TestHttpServer) that streams server-sent events a
// token at a time (1 ms apart, some events cut in two chunks), reports usage with cached tokens,
// and can refuse (429), fail (500), drop the connection mid-stream or hang, by the order in
// which requests arrive.
//
// Its answers are known: max_tokens tokens "w0 w1 ..."; prompt tokens are the length of a
// token-id prompt, else the number of words of the prompt or of all messages; cached tokens are
// a quarter of the prompt tokens, rounded down.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/http_test_server.h"
#include "common/mutex.h"

namespace sluice::bench::testing {

struct FakeBehaviour {
  int reject_every = 0;       // the k-th, 2k-th, ... request (from 1) gets 429
  int drop_every = 0;         // the k-th, ... request (not rejected) is cut off after two tokens
  int fail_all_with = 0;      // every request gets this status
  const char* fail_message = "engine is broken";  // with this error message
  bool hang = false;          // stream the head, then nothing
  bool report_cached = true;  // usage has prompt_tokens_details.cached_tokens
  bool no_stream = false;     // answer with one JSON body, as if "stream" were false
  bool error_event = false;   // after the first token, an error event instead of the rest
  bool done_only = false;     // a stream of [DONE] alone: no token, no finish_reason, no usage
};

class FakeOpenAi {
 public:
  explicit FakeOpenAi(FakeBehaviour b = {})
      : behaviour_(b),
        server_([this](const http::testing::ReceivedRequest& r, http::testing::TestExchange& ex) {
          return handle(r, ex);
        }) {}

  std::string url() const { return server_.url().to_string(); }
  int num_connections() const { return server_.num_connections(); }

  // Read once the run has ended.
  std::vector<nlohmann::json> bodies() const {
    MutexLock lock(mu_);
    return bodies_;
  }
  std::set<std::string> answers() const {
    MutexLock lock(mu_);
    return answers_;
  }
  int max_in_flight() const {
    MutexLock lock(mu_);
    return max_in_flight_;
  }

 private:
  boost::asio::awaitable<void> handle(const http::testing::ReceivedRequest& r, http::testing::TestExchange& ex);
  boost::asio::awaitable<void> respond(const nlohmann::json& body, bool chat, int arrival,
                                       http::testing::TestExchange& ex);

  FakeBehaviour behaviour_;
  mutable Mutex mu_;
  std::vector<nlohmann::json> bodies_ SLUICE_GUARDED_BY(mu_);  // in arrival order
  std::set<std::string> answers_ SLUICE_GUARDED_BY(mu_);
  int in_flight_ SLUICE_GUARDED_BY(mu_) = 0;
  int max_in_flight_ SLUICE_GUARDED_BY(mu_) = 0;
  // Last: destroyed first, so the server stops while the fields above still exist.
  http::testing::TestHttpServer server_;
};

}  // namespace sluice::bench::testing
