// What the engine loop sends its subscribers after a step: prompt scores, sampled tokens checked
// against stops, finishing (every subscriber of a coalesced computation), and the gauges.
#include <algorithm>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/engine_stream.h"
#include "engine/spec/draft_model_proposer.h"

namespace sluice {

void Engine::publish_prompt_scores(std::span<const PromptScore> scores) {
  for (size_t i = 0; i < scores.size();) {
    auto it = computations_.find(scores[i].seq_id);
    if (it == computations_.end()) {
      ++i;
      continue;
    }
    Computation& c = *it->second;
    const SeqId id = c.id;
    std::vector<TokenOutput> fresh;
    int32_t nan_at = 0;  // a prompt position whose logits held NaN: the request fails (as in process_sample)
    for (; i < scores.size() && scores[i].seq_id == id; ++i) {
      // Positions from 1, in order; a recompute after preemption scores them again (the same
      // numbers: batch invariance), and what was published already is skipped.
      if (scores[i].position != c.num_prompt_scored + 1 || nan_at > 0) continue;
      if (scores[i].score.nan_logits) {
        nan_at = scores[i].position;
        continue;
      }
      ++c.num_prompt_scored;
      const SampleResult& r = scores[i].score;
      fresh.push_back({r.token_id, r.logprob, r.top});
    }
    if (nan_at > 0) {
      finish(c, FinishReason::kError,
             fmt::format("the model computed NaN logits scoring prompt token {}: its weights may be damaged (NaN or "
                         "out of range)",
                         nan_at + 1));
      continue;
    }
    if (fresh.empty()) continue;
    for (Subscriber& sub : c.subs) sub.stream->push({}, {}, nullptr, fresh);
    if (!c.coalesce_key.empty()) c.history_prompt.insert(c.history_prompt.end(), fresh.begin(), fresh.end());
  }
}

void Engine::process_sample(Computation& c, const SampleResult& sample) {
  // NaN logits (as -inf to the sampler) come from damaged weights or an overflow: whatever would
  // be sampled from what is left is not the model's answer, so the request fails, saying why.
  if (sample.nan_logits) {
    finish(c, FinishReason::kError,
           fmt::format("the model computed NaN logits for output token {}: its weights may be damaged (NaN or "
                       "out of range)",
                       c.num_output + 1));
    return;
  }
  if (c.max_new == 0) {  // only the prompt's logprobs were asked for
    finish(c, FinishReason::kLength);
    return;
  }
  ++c.num_output;
  TokenOutput token{sample.token_id, 0, {}};
  if (c.request.logprobs) {
    token.logprob = sample.logprob;
    token.top = sample.top;
  }
  const Request& r = c.request;
  // Within the first min_tokens outputs nothing stops the request (the sampler keeps stop
  // tokens out; stop strings are matched only in the text after them).
  const bool before_min = c.num_output <= r.min_tokens;
  const bool user_stop_token =
      std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), sample.token_id) != r.stop_token_ids.end();
  const bool stop_token =
      !before_min && (user_stop_token || (!r.ignore_eos && tokenizer_.is_end_of_generation(sample.token_id)));
  // JSON mode: the sampler allowed only tokens that continue the object; the output ends when
  // it closes. A token outside the mask comes only when the mask allowed nothing at all.
  bool json_done = false;
  if (c.json && !stop_token) {
    if (!c.json->feed(tokenizer_.token_to_piece(sample.token_id))) {
      finish(c, FinishReason::kError, "JSON mode: no token of the vocabulary can continue the JSON object");
      return;
    }
    json_done = c.json->done();
  }
  std::string text;
  bool stopped = stop_token;
  if (before_min) {
    text = c.decoder.push(sample.token_id);
  } else if (!stop_token) {  // a stop token's own text is not part of the output...
    StopMatcher::Step s = c.stops.push(c.decoder.push(sample.token_id));
    text = std::move(s.emit);
    stopped = s.stopped;
    c.stop_matched = s.matched;
  } else if (user_stop_token && r.include_stop_str_in_output) {  // ...unless asked for (as vLLM)
    text = c.stops.flush() + c.decoder.push(sample.token_id);
  }
  const bool done = stopped || json_done || c.num_output == c.max_new;
  if (done && !c.stops.stopped()) {
    // Release what the decoder and the matcher hold back (the rest of a stop string may never
    // come); an incomplete character becomes U+FFFD.
    StopMatcher::Step s = c.stops.push(c.decoder.flush());
    text += s.emit;
    if (s.stopped) {
      stopped = true;
      c.stop_matched = s.matched;
    } else {
      text += c.stops.flush();
    }
  }
  publish(c, {std::move(token)}, std::move(text));
  // JSON mode: "stop" means the object closed, so it parses; cut short by a stop string or a
  // stop token before that, the answer is the start of one, as when cut by max_tokens.
  // A stop string that matched as the object closed cut its end off too.
  const bool stop_reason = c.json ? json_done && !(stopped && !stop_token) : stopped;
  if (done) finish(c, stop_reason ? FinishReason::kStop : FinishReason::kLength);
}

void Engine::publish(Computation& c, std::vector<TokenOutput> tokens, std::string text) {
  const double t = now();
  for (Subscriber& sub : c.subs) {
    if (!tokens.empty() && sub.first_token_time < 0) {
      sub.first_token_time = t;
      sub.num_first_tokens = static_cast<int32_t>(tokens.size());
    }
    sub.stream->push(tokens, text, nullptr);
  }
  if (!c.coalesce_key.empty()) {
    c.history_tokens.insert(c.history_tokens.end(), tokens.begin(), tokens.end());
    c.history_text += text;
  }
}

void Engine::finish_subscriber(Computation& c, Subscriber& sub, FinishReason reason, const std::string& error) {
  const double t = now();
  StreamOutput final;
  final.finished = true;
  final.finish_reason = reason;
  final.error = error;
  final.stop_matched = reason == FinishReason::kStop ? c.stop_matched : std::string();
  RequestMetrics& m = final.metrics;
  m.num_prompt_tokens = static_cast<int32_t>(c.request.prompt_tokens.size());
  m.num_output_tokens = c.num_output;
  m.queue_seconds = std::max(0.0, (c.scheduled_time < 0 ? t : c.scheduled_time) - sub.submit_time);
  m.ttft_seconds = sub.first_token_time < 0 ? 0 : sub.first_token_time - sub.submit_time;
  m.e2e_seconds = t - sub.submit_time;
  // Over the tokens that came after the first ones (a follower that joined late got many at once).
  const bool has_tpot = sub.first_token_time >= 0 && c.num_output > sub.num_first_tokens;
  if (has_tpot) m.tpot_seconds = (t - sub.first_token_time) / (c.num_output - sub.num_first_tokens);
  m.num_preemptions = c.num_preemptions;
  m.coalesced = sub.coalesced;
  m.num_draft_tokens = c.num_draft_tokens;
  m.num_accepted_tokens = c.num_accepted_tokens;
  m.cached_tokens = scheduler_.has(c.id) ? scheduler_.num_cached_tokens(c.id) : 0;
  request_to_seq_.erase(sub.stream->id);
  sub.stream->push({}, {}, &final);
  MutexLock lock(metrics_mu_);
  ++metrics_.num_requests_finished[static_cast<size_t>(reason)];
  metrics_.num_prompt_tokens += m.num_prompt_tokens;
  metrics_.num_generation_tokens += m.num_output_tokens;
  metrics_.queue_seconds.observe(m.queue_seconds);
  metrics_.e2e_seconds.observe(m.e2e_seconds);
  if (sub.first_token_time >= 0) metrics_.ttft_seconds.observe(m.ttft_seconds);
  if (has_tpot) metrics_.tpot_seconds.observe(m.tpot_seconds);
}

void Engine::finish(Computation& c, FinishReason reason, std::string error) {
  for (Subscriber& sub : c.subs) finish_subscriber(c, sub, reason, error);
  scheduler_.finish(c.id);
  runner_.remove_sequence(c.id);
  if (c.proposer) c.proposer->remove_sequence(c.id);
  draft_length_.remove_sequence(c.id);
  if (!c.coalesce_key.empty()) by_coalesce_key_.erase(c.coalesce_key);
  computations_.erase(c.id);  // destroys c
}

void Engine::update_gauges() {
  MutexLock lock(inbox_->mu);  // submit() takes inbox then metrics: same order here
  inbox_->num_waiting = scheduler_.num_waiting();
  MutexLock mlock(metrics_mu_);
  metrics_.num_running = scheduler_.num_running();
  metrics_.num_waiting = scheduler_.num_waiting();
  metrics_.kv_blocks_used = cache_.num_held();
  metrics_.kv_blocks_free = cache_.num_free();
  metrics_.kv_blocks_cached = cache_.num_cached();
  if (draft_) {
    const auto& d = static_cast<const spec::DraftModelProposer&>(*draft_);
    metrics_.draft_kv_blocks_total = d.num_blocks();
    metrics_.draft_kv_blocks_used = d.num_blocks() - d.num_free_blocks();
  }
  metrics_.num_kv_evictions = cache_.num_evictions();
  const Scheduler::CacheStats& cs = scheduler_.cache_stats();
  metrics_.prefix_cache_query_tokens = cs.query_tokens;
  metrics_.prefix_cache_hit_tokens = cs.hit_tokens;
  metrics_.prefix_cache_query_requests = cs.query_requests;
  metrics_.prefix_cache_hit_requests = cs.hit_requests;
  idle_ = computations_.empty() && inbox_->commands.empty();
  if (idle_) idle_cv_.notify_all();
}

}  // namespace sluice
