// Engine: many requests share each forward pass (continuous batching over a paged KV cache).
//
//   caller threads                         engine thread
//   submit(Request) --validate--> inbox --> Computation + Scheduler::add + Runner::add_sequence
//   RequestHandle::next() <-- stream  <--  step: schedule -> Runner::run -> update -> outputs
//   cancel()/~RequestHandle --> inbox --> drop the subscriber; the last one frees the blocks
//
// One engine thread owns the scheduler, the KV cache and every computation; caller threads
// only touch the inbox (a mutex-guarded queue) and their own stream (DESIGN.md). Each
// accepted request ends with exactly one finished output: stop, length, cancelled, or error.
//
// Coalescing: a request identical to one queued or running (same prompt tokens, sampling,
// limits, stops, priority; deterministic: greedy or an explicit seed) subscribes to that computation
// and receives the whole output from its first token, as if it had run alone.
//
// Overload: submit() refuses a request at once (StatusCode::kOverloaded) when the computations
// waiting to run (inbox plus scheduler queue: new ones, and preempted ones waiting to resume)
// reach max_queued_requests.
//
// Thread-safety: submit(), metrics() and the handles may be used from any thread. Destroying
// the engine finishes every outstanding request (kCancelled, "engine shut down").
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/spec/draft_length.h"
#include "engine/spec/proposer.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

// Speculative decoding (engine/spec/): which proposer drafts for every request, and how much.
// A request's own prediction (Request::prediction_tokens) is drafted whatever the method.
struct SpecConfig {
  std::string method = "off";  // off, ngram, draft (draft_model below)
  int32_t num_tokens = 4;      // the most drafts a sequence verifies in one step
  int32_t ngram_min = 2;       // prompt lookup: the shortest suffix matched...
  int32_t ngram_max = 4;       // ...and the longest, tried first
  bool adaptive = true;        // per sequence and step, the number of drafts that maximizes the
                               // expected tokens per second (spec/draft_length.h); off: all of them
  // method "draft": the draft model and its tokenizer (which must match the target's,
  // spec::check_draft_vocabulary), outliving the engine; its KV cache size (0: room for
  // max_num_seqs full contexts of the draft).
  Model* draft_model = nullptr;
  const Tokenizer* draft_tokenizer = nullptr;
  int64_t draft_kv_cache_bytes = 0;
};

struct EngineConfig {
  int32_t max_num_seqs = 32;          // sequences in one step
  int32_t max_batch_tokens = 512;     // tokens in one step
  int32_t max_queued_requests = 256;  // computations waiting to run (new, or preempted)
  int32_t block_size = 16;            // tokens per KV block
  KvType kv_type = KvType::kF16;
  int64_t kv_cache_bytes = 0;         // KV pool size; 0: enough for max_num_seqs full contexts
  bool coalesce = true;               // serve identical concurrent requests from one computation
  bool prefix_caching = true;         // share the KV blocks of common prompt prefixes
  std::string kv_eviction = "lru";    // lru, lfu, pinned (see eviction.h)
  std::vector<std::vector<int32_t>> pinned_prefixes;  // kept by the "pinned" policy
  SpecConfig spec;
  std::function<double()> clock;      // seconds; default: steady_clock
  // Called on the engine thread after each step, before outputs are published (tests, tracing).
  std::function<void(const ScheduleOutput&)> on_step;
};

class Engine;
struct StreamState;
struct Inbox;

// A submitted request's output stream. Move-only; destroying an unfinished handle cancels it.
class RequestHandle {
 public:
  RequestHandle(RequestHandle&&) noexcept;
  RequestHandle& operator=(RequestHandle&&) noexcept;
  ~RequestHandle();

  uint64_t id() const;
  // Blocks until there is output the caller has not seen; the last has finished == true.
  // After the end, returns an empty finished output again.
  StreamOutput next();
  // As next(), waiting at most `timeout`; nullopt if nothing came.
  std::optional<StreamOutput> next_for(std::chrono::milliseconds timeout);
  // As next(), without waiting: nullopt if there is nothing new.
  std::optional<StreamOutput> try_next();
  // Calls `callback` (on the engine thread, or at once on this one if output is already
  // there) each time new output arrives, until the finished output; then it is dropped.
  // Meant for event loops: the callback should only schedule a try_next() elsewhere
  // (hold a weak reference: it may run after the caller stopped caring).
  void on_output(std::function<void()> callback);
  // Reads to the end; returns everything (tokens, text) with the final status.
  StreamOutput wait();
  // Asks the engine to stop this request; it ends with kCancelled (unless it finished first).
  void cancel();

 private:
  friend class Engine;
  RequestHandle(std::shared_ptr<StreamState> state, std::shared_ptr<Inbox> inbox);
  std::shared_ptr<StreamState> state_;
  std::shared_ptr<Inbox> inbox_;
};

class Engine {
 public:
  // Sizes the KV pool and starts the engine thread. Errors for an impossible configuration.
  static Result<std::unique_ptr<Engine>> create(Model& model, const Tokenizer& tokenizer, ThreadPool& pool,
                                                EngineConfig config);
  ~Engine();

  // Validates and queues a request. Errors: kInvalid (empty prompt, unknown token, prompt
  // over the context or the KV pool, bad sampling parameters), kOverloaded (queue full),
  // kUnavailable (shutting down).
  Result<RequestHandle> submit(Request request);
  // Several requests (the choices of one API request), all or none: each is validated and the
  // queue must have room for them all, else none is submitted and the error is the first.
  Result<std::vector<RequestHandle>> submit_all(std::vector<Request> requests);

  // Refuses new requests (kUnavailable), finishes every outstanding one (kCancelled,
  // "engine shut down") and stops the engine thread. Idempotent; the destructor calls it.
  // metrics() and the handles stay usable.
  void shutdown();

  EngineMetrics metrics() const;
  // Blocks until no request is queued or running; returns the metrics of that moment.
  EngineMetrics wait_until_idle() const;
  const EngineConfig& config() const { return config_; }
  int32_t num_kv_blocks() const { return num_blocks_; }
  int64_t kv_capacity_tokens() const { return int64_t{num_blocks_} * config_.block_size; }
  // Of those, what a sequence with this prompt can count on: the pinned prefixes' blocks it
  // does not lie on are kept for them (KvCache::pinned_reserve), so not on every request's.
  int64_t kv_capacity_tokens(std::span<const int32_t> prompt) const;
  size_t kv_cache_bytes() const { return kv_->bytes(); }
  // The draft model's KV cache (0 without one).
  size_t draft_kv_cache_bytes() const;
  // Longest prompt + output one request can have (the context, or the pool if smaller), and
  // for one prompt (less the pinned prefixes' blocks it is not on).
  int32_t max_sequence_tokens() const;
  int32_t max_sequence_tokens(std::span<const int32_t> prompt) const;

 private:
  struct Subscriber;
  struct Computation;

  Engine(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, EngineConfig config, int32_t num_blocks,
         std::unique_ptr<spec::Proposer> draft);
  Status validate(const Request& r) const;
  double now() const { return config_.clock(); }

  void loop();
  void handle_submit(Subscriber sub, Request request);
  void handle_cancel(uint64_t request_id);
  void step();
  void propose_drafts();
  void count_drafts(const ScheduleOutput& out, std::span<const SampledToken> sampled);
  void publish_prompt_scores(std::span<const PromptScore> scores);
  void process_sample(Computation& c, const SampleResult& sample);
  void publish(Computation& c, std::vector<TokenOutput> tokens, std::string text);
  void finish(Computation& c, FinishReason reason, std::string error = {});
  void finish_subscriber(Computation& c, Subscriber& sub, FinishReason reason, const std::string& error);
  void update_gauges();

  Model& model_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  int32_t num_blocks_;
  std::unique_ptr<KvPool> kv_;
  KvCache cache_;
  Scheduler scheduler_;
  Runner runner_;
  std::shared_ptr<Inbox> inbox_;
  std::atomic<uint64_t> next_request_id_{1};
  std::unique_ptr<spec::Proposer> ngram_, prediction_, draft_;
  spec::DraftLength draft_length_;
  std::shared_ptr<JsonVocabulary> json_vocab_;  // JSON mode's masks, built at its first request

  // Engine-thread state.
  std::unordered_map<SeqId, std::unique_ptr<Computation>> computations_;
  std::unordered_map<uint64_t, SeqId> request_to_seq_;      // subscriber id -> its computation
  std::unordered_map<std::string, SeqId> by_coalesce_key_;  // deterministic computations
  SeqId next_seq_id_ = 1;
  uint64_t seed_state_;

  mutable Mutex metrics_mu_;
  mutable CondVar idle_cv_;
  EngineMetrics metrics_ SLUICE_GUARDED_BY(metrics_mu_);
  bool idle_ SLUICE_GUARDED_BY(metrics_mu_) = true;  // no computation and nothing in the inbox

  Mutex shutdown_mu_;
  std::thread thread_ SLUICE_GUARDED_BY(shutdown_mu_);
};

}  // namespace sluice
