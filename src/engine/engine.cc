#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/check.h"
#include "engine/spec/draft_model_proposer.h"
#include "engine/spec/ngram_proposer.h"
#include "engine/spec/prediction_proposer.h"
#include "engine/engine_internal.h"
#include "engine/engine_stream.h"

namespace sluice {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

// ---- Engine ----

namespace {

// The bytes that make two requests produce the same output, or "" if the output is not
// deterministic (sampling without an explicit seed).
std::string coalesce_key(const Request& r) {
  if (r.sampling.temperature > 0 && !r.seed) return {};
  std::string key;
  auto put = [&](const auto& v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  auto put_ints = [&](const std::vector<int32_t>& v) {
    put(v.size());
    key.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
  };
  put_ints(r.prompt_tokens);
  const SamplingParams& s = r.sampling;
  put(s.temperature), put(s.top_k), put(s.top_p), put(s.min_p), put(s.repetition_penalty);
  put(s.presence_penalty), put(s.frequency_penalty), put(s.top_logprobs);
  put(r.sampling.temperature > 0 ? *r.seed : uint64_t{0});
  put(r.max_tokens), put(r.ignore_eos), put(r.logprobs), put(r.min_tokens), put(r.include_stop_str_in_output);
  put(r.prompt_logprobs);
  put_ints(r.stop_token_ids);
  put_ints(r.prediction_tokens);  // not the output, but the drafting (and so the step metrics)
  put(r.speculative);
  put(r.response_format);
  put(r.priority);  // a joiner would wait at the first one's priority
  put(r.stop_strings.size());
  for (const std::string& st : r.stop_strings) put(st.size()), key += st;
  return key;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(Model& model, const Tokenizer& tokenizer, ThreadPool& pool,
                                               EngineConfig config) {
  const ModelConfig& mc = model.config();
  if (config.max_num_seqs < 1) return Error(StatusCode::kInvalid, "max-num-seqs must be >= 1, got {}", config.max_num_seqs);
  if (config.max_batch_tokens < 1) {
    return Error(StatusCode::kInvalid, "max-batch-tokens must be >= 1, got {}", config.max_batch_tokens);
  }
  if (config.max_batch_tokens < config.max_num_seqs) {
    return Error(StatusCode::kInvalid,
                 "max-batch-tokens ({}) must be at least max-num-seqs ({}): every running sequence needs a token "
                 "in each step",
                 config.max_batch_tokens, config.max_num_seqs);
  }
  auto policy = make_eviction_policy(config.kv_eviction, 1);
  if (!policy) return Error(policy.error());
  const SpecConfig& sc = config.spec;
  if (sc.method != "off" && sc.method != "ngram" && sc.method != "draft") {
    return Error(StatusCode::kInvalid, "unknown speculative method '{}': off, ngram or draft", sc.method);
  }
  if ((sc.method == "draft") != (sc.draft_model != nullptr) || (sc.draft_model != nullptr) != (sc.draft_tokenizer != nullptr)) {
    return Error(StatusCode::kInvalid, "speculative method 'draft' and a draft model go together (--spec draft "
                 "--draft-model FILE)");
  }
  if (sc.num_tokens < 1 || sc.num_tokens > 64) {
    return Error(StatusCode::kInvalid, "spec-tokens must be in [1, 64], got {}", sc.num_tokens);
  }
  if (sc.ngram_min < 1 || sc.ngram_max < sc.ngram_min || sc.ngram_max > 64) {
    return Error(StatusCode::kInvalid, "spec-ngram-min/max must satisfy 1 <= min <= max <= 64, got {} and {}",
                 sc.ngram_min, sc.ngram_max);
  }
  if (config.pinned_prefixes.size() > 64) return Error(StatusCode::kInvalid, "at most 64 pinned prefixes");
  if (config.max_queued_requests < 1) {
    return Error(StatusCode::kInvalid, "max-queued-requests must be >= 1, got {}", config.max_queued_requests);
  }
  if (config.block_size < 1 || config.block_size > 1024) {
    return Error(StatusCode::kInvalid, "block size must be in [1, 1024], got {}", config.block_size);
  }
  const size_t block_bytes = KvPool::bytes_per_token(mc, config.kv_type) * config.block_size;
  if (config.kv_cache_bytes < 0) return Error(StatusCode::kInvalid, "KV cache size must be >= 0");
  int64_t num_blocks = 0;
  if (config.kv_cache_bytes == 0) {
    num_blocks = int64_t{config.max_num_seqs} * ((mc.context_length + config.block_size - 1) / config.block_size);
  } else {
    num_blocks = config.kv_cache_bytes / static_cast<int64_t>(block_bytes);
  }
  if (num_blocks < 1) {
    return Error(StatusCode::kInvalid, "a KV cache of {} bytes holds no block: one block of {} tokens takes {} bytes",
                 config.kv_cache_bytes, config.block_size, block_bytes);
  }
  const int32_t reserve = KvCache::pinned_reserve(
      KvCacheConfig{.block_size = config.block_size, .prefix_caching = config.prefix_caching,
                    .pinned_prefixes = config.pinned_prefixes},
      (*policy)->protects_pinned());
  if (reserve >= num_blocks) {
    return Error(StatusCode::kInvalid, "the pinned prefixes take {} blocks of {} tokens, the whole KV cache of {} "
                 "blocks, and would leave no room for any other sequence; give more --kv-cache-memory or pin less",
                 reserve, config.block_size, num_blocks);
  }
  // More than the machine has can only fail (at once, or when the pages are first touched).
  const double kv_bytes = static_cast<double>(num_blocks) * static_cast<double>(block_bytes);
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0 && kv_bytes > static_cast<double>(pages) * static_cast<double>(page_size)) {
    return Error(StatusCode::kInvalid, "a KV cache of {:.1f} GiB is more than this machine's memory ({:.1f} GiB); "
                 "lower --kv-cache-memory",
                 kv_bytes / (1 << 30), static_cast<double>(pages) * static_cast<double>(page_size) / (1 << 30));
  }
  if (num_blocks > INT32_MAX / config.block_size) {
    return Error(StatusCode::kInvalid, "a KV cache of {} blocks of {} tokens is too large: at most {} blocks",
                 num_blocks, config.block_size, INT32_MAX / config.block_size);
  }
  if (!config.clock) {
    config.clock = [] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
  }
  std::unique_ptr<spec::Proposer> draft;
  if (sc.draft_model != nullptr) {
    if (Status s = spec::check_draft_vocabulary(tokenizer, *sc.draft_tokenizer); !s) {
      return Error(StatusCode::kInvalid, "the draft model cannot draft for this model: {}", s.message());
    }
    const ModelConfig& dc = sc.draft_model->config();
    int64_t draft_bytes = sc.draft_kv_cache_bytes;
    if (draft_bytes < 0) return Error(StatusCode::kInvalid, "draft KV cache size must be >= 0");
    if (draft_bytes == 0) {
      const int64_t tokens = int64_t{config.max_num_seqs} * std::min(dc.context_length, mc.context_length);
      const auto per_token = static_cast<int64_t>(KvPool::bytes_per_token(dc, config.kv_type));
      draft_bytes = (tokens + int64_t{config.max_num_seqs} * config.block_size) * per_token;
    }
    if (pages > 0 && page_size > 0 && static_cast<double>(draft_bytes) > static_cast<double>(pages) * page_size) {
      return Error(StatusCode::kInvalid, "a draft KV cache of {:.1f} GiB is more than this machine's memory; lower "
                   "--draft-kv-cache-memory", static_cast<double>(draft_bytes) / (1 << 30));
    }
    try {
      auto p = spec::DraftModelProposer::create(*sc.draft_model, mc.vocab_size, pool, draft_bytes, config.block_size,
                                                config.max_batch_tokens, config.kv_type);
      if (!p) return Error(p.error());
      draft = std::move(*p);
    } catch (const std::bad_alloc&) {
      return Error("cannot allocate a draft KV cache of {:.1f} GiB: out of memory; lower --draft-kv-cache-memory",
                   static_cast<double>(draft_bytes) / (1 << 30));
    }
  }
  try {
    return std::unique_ptr<Engine>(
        new Engine(model, tokenizer, pool, std::move(config), static_cast<int32_t>(num_blocks), std::move(draft)));
  } catch (const std::bad_alloc&) {
    return Error("cannot allocate a KV cache of {:.1f} GiB: out of memory; lower --kv-cache-memory",
                 kv_bytes / (1 << 30));
  }
}

Engine::Engine(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, EngineConfig config, int32_t num_blocks,
               std::unique_ptr<spec::Proposer> draft)
    : model_(model),
      tokenizer_(tokenizer),
      config_(std::move(config)),
      num_blocks_(num_blocks),
      kv_(std::make_unique<KvPool>(model.config(), num_blocks, config_.block_size, config_.kv_type)),
      cache_(KvCacheConfig{num_blocks, config_.block_size, config_.prefix_caching, config_.kv_eviction,
                           config_.pinned_prefixes},
             config_.clock),
      scheduler_(SchedulerConfig{config_.max_num_seqs, config_.max_batch_tokens, config_.block_size}, cache_),
      runner_(model, *kv_, pool),
      inbox_(std::make_shared<Inbox>()),
      seed_state_(std::random_device{}()) {
  draft_ = std::move(draft);
  if (config_.spec.method == "ngram") {
    ngram_ = std::make_unique<spec::NgramProposer>(config_.spec.ngram_min, config_.spec.ngram_max);
  }
  prediction_ = std::make_unique<spec::PredictionProposer>();
  metrics_.kv_blocks_total = num_blocks;
  metrics_.kv_blocks_free = num_blocks;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    MutexLock lock(inbox_->mu);
    inbox_->closed = true;
  }
  inbox_->cv.notify_all();
  MutexLock lock(shutdown_mu_);
  if (thread_.joinable()) thread_.join();
}

size_t Engine::draft_kv_cache_bytes() const {
  return draft_ ? static_cast<const spec::DraftModelProposer&>(*draft_).kv_bytes() : 0;
}

int64_t Engine::kv_capacity_tokens(std::span<const int32_t> prompt) const {
  return int64_t{num_blocks_ - cache_.pinned_reserve() + cache_.pinned_blocks_on(prompt)} * config_.block_size;
}

int32_t Engine::max_sequence_tokens(std::span<const int32_t> prompt) const {
  return static_cast<int32_t>(std::min<int64_t>(model_.config().context_length, kv_capacity_tokens(prompt)));
}

int32_t Engine::max_sequence_tokens() const {
  return static_cast<int32_t>(std::min<int64_t>(model_.config().context_length, kv_capacity_tokens()));
}

Status Engine::validate(const Request& r) const {
  const ModelConfig& c = model_.config();
  auto invalid = [](std::string m) { return Status::error(std::move(m), StatusCode::kInvalid); };
  const auto num_prompt = static_cast<int64_t>(r.prompt_tokens.size());
  if (num_prompt == 0) return invalid("the prompt is empty");
  for (int64_t i = 0; i < num_prompt; ++i) {
    if (r.prompt_tokens[i] < 0 || r.prompt_tokens[i] >= c.vocab_size) {
      return invalid(fmt::format("prompt token {} (at index {}) is outside the vocabulary (0..{})", r.prompt_tokens[i],
                                 i, c.vocab_size - 1));
    }
  }
  // A prompt only scored (max_tokens 0) may fill the context; one that generates needs a place
  // for its first new token.
  const int64_t spare = r.max_tokens == 0 ? 0 : 1;
  if (num_prompt + spare > c.context_length) {
    return invalid(fmt::format("the prompt has {} tokens; it must be {} the model's context of {} tokens", num_prompt,
                               spare ? "shorter than" : "at most", c.context_length));
  }
  if (num_prompt + spare > kv_capacity_tokens()) {
    return invalid(fmt::format("the prompt has {} tokens; the KV cache holds only {} tokens (raise --kv-cache-memory)",
                               num_prompt, kv_capacity_tokens()));
  }
  if (const int64_t room = kv_capacity_tokens(r.prompt_tokens); num_prompt + spare > room) {
    return invalid(fmt::format("the prompt has {} tokens; the KV cache holds only {} tokens beside the pinned "
                               "prefixes' {} blocks (raise --kv-cache-memory, or pin less)",
                               num_prompt, room, cache_.pinned_reserve()));
  }
  if (r.max_tokens < 0) return invalid(fmt::format("max tokens must be >= 0, got {}", r.max_tokens));
  if (r.min_tokens < 0 || r.min_tokens > r.max_tokens) {
    return invalid(fmt::format("min_tokens must be in [0, max_tokens = {}], got {}", r.max_tokens, r.min_tokens));
  }
  if (Status s = r.sampling.validate(); !s) return invalid(s.message());
  if (r.response_format == ResponseFormat::kJsonObject && r.min_tokens > 0) {
    return invalid("min_tokens cannot be combined with a JSON response format: the output ends when the JSON object "
                   "is complete");
  }
  for (int32_t id : r.prediction_tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid(fmt::format("prediction token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1));
    }
  }
  for (int32_t id : r.stop_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return invalid(fmt::format("stop token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1));
    }
  }
  return Status::ok();
}

Result<RequestHandle> Engine::submit(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  SLUICE_ASSIGN_OR_RETURN(std::vector<RequestHandle> handles, submit_all(std::move(one)));
  return std::move(handles.front());
}

Result<std::vector<RequestHandle>> Engine::submit_all(std::vector<Request> requests) {
  for (const Request& r : requests) {
    if (Status s = validate(r); !s) {
      MutexLock lock(metrics_mu_);
      ++metrics_.num_requests_rejected;  // the API request, once
      return Error(s);
    }
  }
  std::vector<RequestHandle> handles;
  {
    MutexLock lock(inbox_->mu);
    if (inbox_->closed) return Error(StatusCode::kUnavailable, "the engine is shutting down");
    const int64_t waiting = inbox_->num_submits + inbox_->num_waiting;
    if (waiting + static_cast<int64_t>(requests.size()) > config_.max_queued_requests) {
      MutexLock mlock(metrics_mu_);
      ++metrics_.num_requests_rejected;
      ++metrics_.num_requests_overloaded;
      return Error(StatusCode::kOverloaded, "overloaded: {} requests are already waiting (--max-queued-requests {}){}",
                   waiting, config_.max_queued_requests,
                   requests.size() > 1 ? fmt::format("; no room for these {}", requests.size()) : "");
    }
    const double at = now();
    for (Request& r : requests) {
      auto stream = std::make_shared<StreamState>(next_request_id_++);
      inbox_->commands.push_back({Command::kSubmit, stream, std::move(r), at, 0});
      ++inbox_->num_submits;
      handles.push_back(RequestHandle(std::move(stream), inbox_));
    }
    MutexLock mlock(metrics_mu_);
    metrics_.num_requests_submitted += static_cast<int64_t>(requests.size());
    idle_ = false;
  }
  inbox_->cv.notify_all();
  return handles;
}

EngineMetrics Engine::metrics() const {
  MutexLock lock(metrics_mu_);
  return metrics_;
}

EngineMetrics Engine::wait_until_idle() const {
  MutexLock lock(metrics_mu_);
  while (!idle_) idle_cv_.wait(lock);
  return metrics_;
}

void Engine::loop() {
  for (;;) {
    std::deque<Command> commands;
    {
      MutexLock lock(inbox_->mu);
      while (!inbox_->closed && inbox_->commands.empty() && computations_.empty()) inbox_->cv.wait(lock);
      if (inbox_->closed) break;
      commands.swap(inbox_->commands);
      inbox_->num_submits = 0;
      // Until the step below runs, these requests count as waiting.
      for (const Command& c : commands) inbox_->num_waiting += c.kind == Command::kSubmit;
    }
    for (Command& c : commands) {
      if (c.kind == Command::kSubmit) {
        Subscriber sub{std::move(c.stream), c.submit_time};
        handle_submit(std::move(sub), std::move(c.request));
      } else {
        handle_cancel(c.request_id);
      }
    }
    if (!computations_.empty()) step();
    update_gauges();
  }
  // Shutting down: everything outstanding ends now.
  std::deque<Command> left;
  {
    MutexLock lock(inbox_->mu);
    left.swap(inbox_->commands);
  }
  for (Command& c : left) {
    if (c.kind != Command::kSubmit) continue;
    StreamOutput final;
    final.finish_reason = FinishReason::kCancelled;
    final.error = "engine shut down";
    c.stream->push({}, {}, &final);
    MutexLock lock(metrics_mu_);
    ++metrics_.num_requests_finished[static_cast<size_t>(FinishReason::kCancelled)];  // submitted, so finished
  }
  while (!computations_.empty()) finish(*computations_.begin()->second, FinishReason::kCancelled, "engine shut down");
  update_gauges();  // the blocks they held are free: metrics() says so after shutdown too
  MutexLock lock(metrics_mu_);
  idle_ = true;
  idle_cv_.notify_all();
}

void Engine::handle_submit(Subscriber sub, Request request) {
  const auto num_prompt = static_cast<int32_t>(request.prompt_tokens.size());
  const int32_t max_new = std::min(request.max_tokens, max_sequence_tokens(request.prompt_tokens) - num_prompt);
  std::string key = config_.coalesce ? coalesce_key(request) : std::string();
  if (!key.empty()) {
    if (auto it = by_coalesce_key_.find(key); it != by_coalesce_key_.end()) {
      Computation& c = *computations_.at(it->second);
      sub.coalesced = true;
      if (!c.history_tokens.empty()) {
        sub.first_token_time = now();
        sub.num_first_tokens = static_cast<int32_t>(c.history_tokens.size());
      }
      sub.stream->push(c.history_tokens, c.history_text, nullptr, c.history_prompt);
      request_to_seq_[sub.stream->id] = c.id;
      c.subs.push_back(std::move(sub));
      MutexLock lock(metrics_mu_);
      ++metrics_.num_requests_coalesced;
      return;
    }
  }
  const SeqId id = next_seq_id_++;
  if (!request.seed) request.seed = Xoshiro256::splitmix64(seed_state_);
  request.sampling.seed = *request.seed;
  auto c = std::make_unique<Computation>(id, std::move(request), tokenizer_);
  c->max_new = max_new;
  request_to_seq_[sub.stream->id] = id;
  c->subs.push_back(std::move(sub));
  if (max_new == 0 && !c->request.prompt_logprobs) {  // nothing to compute
    computations_.emplace(id, std::move(c));
    finish(*computations_.at(id), FinishReason::kLength);
    return;
  }
  c->coalesce_key = std::move(key);
  if (!c->coalesce_key.empty()) by_coalesce_key_.emplace(c->coalesce_key, id);
  scheduler_.add(id, c->request.prompt_tokens, c->request.priority, c->request.prompt_logprobs);
  std::vector<int32_t> suppressed;
  if (c->request.min_tokens > 0) {
    suppressed = c->request.stop_token_ids;
    if (!c->request.ignore_eos) {
      for (int32_t t = 0; t < tokenizer_.vocab_size(); ++t) {
        if (tokenizer_.is_end_of_generation(t)) suppressed.push_back(t);
      }
    }
  }
  runner_.add_sequence(id, c->request.sampling, c->request.prompt_tokens, std::move(suppressed),
                       c->request.min_tokens);
  if (c->request.response_format == ResponseFormat::kJsonObject) {
    if (!json_vocab_) {
      std::vector<std::string> pieces(static_cast<size_t>(tokenizer_.vocab_size()));
      for (int32_t t = 0; t < tokenizer_.vocab_size(); ++t) pieces[static_cast<size_t>(t)] = tokenizer_.token_to_piece(t);
      json_vocab_ = std::make_shared<JsonVocabulary>(std::move(pieces));
    }
    runner_.constrain(id, JsonConstraint(json_vocab_));
    c->json.emplace();
  }
  if (c->request.speculative) {
    c->proposer = !c->request.prediction_tokens.empty() ? prediction_.get() : ngram_ ? ngram_.get() : draft_.get();
    if (c->proposer) c->proposer->add_sequence(id, c->request);
  }
  computations_.emplace(id, std::move(c));
}

void Engine::handle_cancel(uint64_t request_id) {
  auto it = request_to_seq_.find(request_id);
  if (it == request_to_seq_.end()) return;  // finished already
  Computation& c = *computations_.at(it->second);
  auto sub = std::find_if(c.subs.begin(), c.subs.end(), [&](const Subscriber& s) { return s.stream->id == request_id; });
  SLUICE_CHECK(sub != c.subs.end());
  if (c.subs.size() == 1) {
    finish(c, FinishReason::kCancelled);  // the last one: the computation stops
    return;
  }
  finish_subscriber(c, *sub, FinishReason::kCancelled, {});
  c.subs.erase(sub);
}

void Engine::step() {
  const auto step_started = std::chrono::steady_clock::now();  // drafting included, for the outcome
  propose_drafts();
  ScheduleOutput out = scheduler_.schedule();
  for (SeqId id : out.preempted) ++computations_.at(id)->num_preemptions;
  // Every sequence fits the pool alone (validate() and the max_new clamp), so a step with
  // sequences present always schedules something.
  SLUICE_CHECK(!out.empty()) << "no sequence could be scheduled: " << scheduler_.num_running() << " running, "
                             << scheduler_.num_waiting() << " waiting";
  {
    // Admitted requests stop counting against the queue bound before the forward pass runs.
    MutexLock lock(inbox_->mu);
    inbox_->num_waiting = scheduler_.num_waiting();
  }
  const double t = now();
  for (const ScheduledSeq& s : out.seqs) {
    Computation& c = *computations_.at(s.seq_id);
    if (c.scheduled_time < 0) c.scheduled_time = t;
  }
  // The step's cost, for the draft length policy: measured on the real clock, whatever the
  // engine's clock is (a test's fake clock does not move).
  const auto started = std::chrono::steady_clock::now();
  Result<RunnerOutput> result = runner_.run(out);
  int32_t num_logits = 0, num_drafts = 0;
  for (const ScheduledSeq& s : out.seqs) {
    num_logits += s.sample ? s.num_draft + 1 : 0;
    num_drafts += s.num_draft;
  }
  const auto ended = std::chrono::steady_clock::now();
  draft_length_.observe_step(out.num_tokens, num_logits, std::chrono::duration<double>(ended - started).count());
  if (result && num_logits == out.num_tokens) {
    draft_length_.observe_outcome(static_cast<int32_t>(out.seqs.size()), num_drafts,
                                  static_cast<int32_t>(result->sampled.size()),
                                  std::chrono::duration<double>(ended - step_started).count());
  }
  if (!result) {
    for (const ScheduledSeq& s : out.seqs) finish(*computations_.at(s.seq_id), FinishReason::kError, result.error().message());
    return;
  }
  scheduler_.update(out, result->sampled);
  count_drafts(out, result->sampled);
  if (config_.on_step) config_.on_step(out);
  publish_prompt_scores(result->prompt);
  for (size_t i = 0; i < result->sampled.size(); ++i) {
    // A sequence that finished at one of its tokens (a stop, say) drops the accepted ones after
    // it: they count neither as output nor as accepted drafts of the request.
    const std::vector<SampledToken>& sampled = result->sampled;
    auto it = computations_.find(sampled[i].seq_id);
    if (it == computations_.end()) continue;
    if (i + 1 < sampled.size() && sampled[i + 1].seq_id == sampled[i].seq_id) ++it->second->num_accepted_tokens;
    process_sample(*it->second, result->samples[i]);  // may finish it
  }
  MutexLock lock(metrics_mu_);
  ++metrics_.num_steps;
  metrics_.num_scheduled_tokens += out.num_tokens;
  metrics_.num_preemptions += static_cast<int64_t>(out.preempted.size());
  metrics_.last_step_tokens = out.num_tokens;
  metrics_.last_step_seqs = static_cast<int32_t>(out.seqs.size());
  metrics_.tokens_per_step.observe(out.num_tokens);
  metrics_.seqs_per_step.observe(static_cast<double>(out.seqs.size()));
}

}  // namespace sluice
