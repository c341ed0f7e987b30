#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/stop_matcher.h"
#include "model/kv_pool.h"
#include "tokenizer/stream_decoder.h"

namespace sluice {
namespace {

constexpr int32_t kBlockSize = 16;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::string_view finish_reason_name(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

Generator::Generator(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int32_t prefill_chunk)
    : model_(model), tokenizer_(tokenizer), pool_(pool), prefill_chunk_(std::max(1, prefill_chunk)) {}

Result<GenerateResult> Generator::generate(const GenerateRequest& req,
                                           const std::function<void(std::string_view)>& on_text) {
  const ModelConfig& c = model_.config();
  const auto num_prompt = static_cast<int32_t>(req.prompt_tokens.size());
  if (num_prompt == 0) return Error("the prompt is empty");
  if (num_prompt >= c.context_length) {
    return Error("prompt has {} tokens; it must be shorter than the model's context of {} tokens", num_prompt,
                 c.context_length);
  }
  if (req.max_tokens < 0) return Error("max tokens must be >= 0, got {}", req.max_tokens);
  if (Status s = req.sampling.validate(); !s) return Error(s);
  for (int32_t id : req.stop_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return Error("stop token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1);
    }
  }
  const int32_t max_new = std::min(req.max_tokens, c.context_length - num_prompt);

  const int32_t total = num_prompt + max_new;
  const int32_t num_blocks = (total + kBlockSize - 1) / kBlockSize;
  KvPool kv(c, num_blocks, kBlockSize);
  std::vector<int32_t> blocks(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) blocks[i] = i;

  GenerateResult result;
  Sampler sampler(req.sampling, req.prompt_tokens);
  StreamDecoder decoder(tokenizer_);
  StopMatcher stops(req.stop_strings);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (on_text) on_text(text);
  };

  std::vector<float> logits;
  auto step = [&](int32_t first_pos, std::span<const int32_t> tokens) -> Status {
    ForwardBatch b;
    b.block_size = kBlockSize;
    b.max_blocks_per_seq = num_blocks;
    const int32_t seq = b.add_sequence(blocks);
    for (size_t i = 0; i < tokens.size(); ++i) {
      b.add_token(seq, tokens[i], first_pos + static_cast<int32_t>(i), i + 1 == tokens.size());
    }
    return model_.forward(b, kv, pool_, logits);
  };

  auto start = std::chrono::steady_clock::now();
  for (int32_t pos = 0; pos < num_prompt; pos += prefill_chunk_) {
    const int32_t n = std::min(prefill_chunk_, num_prompt - pos);
    if (Status s = step(pos, std::span(req.prompt_tokens).subspan(pos, n)); !s) return Error(s);
  }
  result.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  bool token_stop = false, string_stop = false;
  for (int32_t i = 0; i < max_new && !token_stop && !string_stop; ++i) {
    if (i > 0) {
      const int32_t last = result.output_tokens.back();
      if (Status s = step(num_prompt + i - 1, std::span(&last, 1)); !s) return Error(s);
    }
    SampleResult sample = sampler.sample(logits);
    sampler.accept(sample.token_id);
    result.output_tokens.push_back(sample.token_id);
    result.samples.push_back(sample);
    const bool stop_id = std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), sample.token_id) !=
                         req.stop_token_ids.end();
    if (stop_id || (!req.ignore_eos && tokenizer_.is_end_of_generation(sample.token_id))) {
      token_stop = true;  // the stop token's own text is not emitted
      break;
    }
    StopMatcher::Step s = stops.push(decoder.push(sample.token_id));
    emit(s.emit);
    string_stop = s.stopped;
    result.stop_matched = s.matched;
  }
  if (!string_stop) {
    // Release what the decoder and the stop matcher still hold (the end of a stop string may
    // never come); an incomplete character becomes U+FFFD.
    StopMatcher::Step s = stops.push(decoder.flush());
    emit(s.emit);
    string_stop = s.stopped;
    result.stop_matched = s.matched;
    if (!string_stop) emit(stops.flush());
  }
  result.finish_reason = token_stop || string_stop ? FinishReason::kStop : FinishReason::kLength;
  result.decode_seconds = seconds_since(start);
  return result;
}

}  // namespace sluice
