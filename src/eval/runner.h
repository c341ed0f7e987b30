// Running a suite: plan (render every request, learn each endpoint's system_fingerprint, compute
// the run's fingerprint), then execute (send with -j workers through the cache, grade, store).
//
// Items and samples: an item is one (provider, prompt, test) or one likelihood item of one
// provider; it is keyed by a hash of its inputs (provider label, prompt label, test description
// and vars; or task name and item id), never by the rendered text or the model, so a candidate
// with another model or another prompt wording lines up item by item with its baseline. Each
// item has `repeat` samples; a sample's seed is the provider's seed + its index (when a seed is
// set), so repeats are independent and reproducible.
//
// The cache key of a request is (endpoint fingerprint = base URL + model + the endpoint's
// system_fingerprint, the request body, the sample index): a re-run against an unchanged server
// answers from the cache, a changed server (another model file, config or chat template, as
// sluice's fingerprint says) is asked again.
//
// The run's fingerprint hashes the suite (and every file it read), every request body and every
// provider's system_fingerprint: equal fingerprints mean nothing that matters changed
// (`sluice eval run --if-changed`).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/assertions.h"
#include "eval/client.h"
#include "eval/store.h"
#include "eval/suite.h"

namespace sluice::eval {

struct RunOptions {
  int32_t jobs = 4;
  CallOptions call;
  bool use_cache = true;
  int32_t repeat = 0;                 // > 0: overrides the suite's
  std::string base_url;               // non-empty: every provider's endpoint (and the judge's)
  // With base_url: that endpoint's key ("" none) in place of the providers' environment
  // variables, so no key meant for another endpoint is sent to it.
  std::optional<std::string> api_key;
  std::string model;                  // non-empty: every provider's model
  Json params = Json::object();       // request fields over every provider's (--set)
  std::function<void(int64_t done, int64_t total)> progress;
  // Set (from a signal handler, say) to stop: no more requests are sent, those in flight end,
  // and the run is stored as "interrupted" without grades; its answers stay in the cache.
  const std::atomic<bool>* stop = nullptr;
};

// One request to send.
struct Task {
  enum Kind { kTest, kChoice, kPerplexity } kind = kTest;
  std::string item_key;
  int32_t sample = 0;
  size_t provider = 0;
  size_t test = 0;                    // kTest: index into suite.tests
  size_t task = 0, item = 0, choice = 0;  // likelihood
  std::string prompt_label;
  Json body;
  std::string cache_key;
};

struct Plan {
  Suite suite;                        // with the overrides applied
  std::vector<Task> tasks;
  std::vector<std::string> endpoint_fingerprints;  // per provider: its system_fingerprint ("" if none)
  std::string fingerprint;
  std::vector<std::string> notes;     // what the run should tell the user (a provider without a fingerprint)
};

// Errors: kInvalid (a template or a provider that cannot work), kUnavailable (a provider
// could not be reached: no requests were sent beyond the probe).
Result<Plan> plan_run(const Suite& suite, const RunOptions& options);

struct RunOutcome {
  int64_t run_id = 0;
  int64_t num_items = 0, num_samples = 0, num_passed = 0, num_failed = 0;
  int64_t num_errors = 0;             // samples without an answer (infrastructure)
  int64_t num_refused = 0;            // of those, refused by the endpoint (HTTP 4xx but 429): the suite's fault
  int64_t num_cached = 0, num_sent = 0;
  std::string first_error;
  Json summary;
  bool interrupted = false;           // RunOptions::stop was set: nothing graded
};

// Sends, grades and stores every task of `plan` as run `label`. The run ends "done", or
// "failed" when some answers never came (RunOutcome::num_errors; the rest is stored and cached),
// or "interrupted" (RunOptions::stop).
Result<RunOutcome> execute_run(const Plan& plan, Store& store, const RunOptions& options);

// A content hash as hex (two independent 64-bit FNV-1a variants, 128 bits), for keys and
// fingerprints; stable across machines and runs.
std::string content_hash(std::string_view data);

}  // namespace sluice::eval
