#include "cli/engine_options.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include <fmt/format.h>

#include "cli/commands.h"
#include "common/meminfo.h"
#include "common/utf8.h"
#include "kernels/kernel_path.h"

namespace sluice::cli {

void EngineOptions::add_to(CLI::App& cmd) {
  cmd.add_option("--max-num-seqs", max_num_seqs, "Most sequences in one forward pass (the batch size)")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd.add_option("--max-batch-tokens", max_batch_tokens,
                 "Most tokens in one forward pass, summed over sequences; long prompts are split into chunks")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--max-queued-requests", max_queued_requests,
                 "Requests that may wait to run (new ones, and preempted ones waiting to resume); more are refused as "
                 "overloaded")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--block-size", block_size, "Tokens per KV cache block")
      ->capture_default_str()->check(CLI::Range(1, 1024));
  cmd.add_option("--kv-cache-memory", kv_cache_memory,
                 "KV cache size: bytes (e.g. 512MiB, 2G, 1.5GB), a fraction of available memory (e.g. 0.4), or "
                 "'auto': room for max-num-seqs full contexts, at most 40% of available memory")
      ->capture_default_str();
  cmd.add_option("--kv-cache-dtype", kv_cache_dtype, "KV cache element type: f16 (half the memory) or f32")
      ->capture_default_str()->check(CLI::IsMember({"f16", "f32"}));
  cmd.add_flag("--no-coalesce", no_coalesce,
               "Compute identical concurrent requests separately instead of once (for comparisons)");
  cmd.add_flag("--no-prefix-cache", no_prefix_cache,
               "Do not share KV blocks of common prompt prefixes between requests (for comparisons)");
  cmd.add_option("--kv-eviction", kv_eviction,
                 "Which cached KV blocks give way when the cache is full: lru (least recently used), lfu (least "
                 "frequently used), pinned (lru, but --pin-prefix prefixes never leave)")
      ->capture_default_str()->check(CLI::IsMember({"lru", "lfu", "pinned"}));
  cmd.add_option("--pin-prefix", pin_prefixes,
                 "Prompt prefix (text, e.g. a system prompt) the pinned policy keeps cached once computed; repeatable");
  cmd.add_option("--spec", spec,
                 "Speculative decoding for every request: off; ngram (prompt lookup: draft the continuation of the "
                 "latest earlier occurrence of the last tokens in the prompt and output); draft (a draft model, "
                 "--draft-model; the default when one is given). A request's own `prediction` is drafted either "
                 "way. Outputs are the same with it on or off, only faster or slower. Default: off, or draft when "
                 "--draft-model is given")
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  cmd.add_option("--spec-tokens", spec_tokens, "Most draft tokens a sequence verifies in one step")
      ->capture_default_str()->check(CLI::Range(1, 64));
  cmd.add_option("--spec-ngram-min", spec_ngram_min, "Prompt lookup: the shortest run of last tokens matched")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->each([this](const std::string&) { ngram_given = true; });
  cmd.add_option("--spec-ngram-max", spec_ngram_max,
                 "Prompt lookup: the longest run of last tokens matched (tried first)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->each([this](const std::string&) { ngram_given = true; });
  cmd.add_option("--spec-adaptive", spec_adaptive,
                 "on: each step, each sequence verifies the number of its drafts (0 to --spec-tokens) that maximizes "
                 "the expected tokens per second, from its measured acceptance and the measured step times, so "
                 "that large batches stop speculating; off: always all of them (for experiments)")
      ->capture_default_str()->check(CLI::IsMember({"on", "off"}));
  cmd.add_option("--draft-model", draft_model,
                 "GGUF draft model for speculative decoding: a smaller model with the same tokenizer, or a lower-bit "
                 "copy of this one (sluice model quantize); its vocabulary is checked against the model's");
  cmd.add_option("--draft-kv-cache-memory", draft_kv_cache_memory,
                 "The draft model's KV cache: bytes (e.g. 256MiB), a fraction of available memory, or 'auto': room "
                 "for max-num-seqs full contexts of the draft, at most 10% of available memory")
      ->capture_default_str()
      ->each([this](const std::string&) { draft_kv_given = true; });
}

Result<int64_t> parse_memory_size(const std::string& text, int64_t available_bytes, std::string_view flag) {
  auto bad = [&] {
    return Error(StatusCode::kInvalid,
                 "{} must be 'auto', a size such as 512MiB, 2G or 1.5GB, or a fraction of available "
                 "memory such as 0.4; got '{}'",
                 flag, text);
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, i), &used);
    if (used != i) return bad();
  } catch (...) {
    return bad();
  }
  std::string unit = text.substr(i);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const bool has_point = text.substr(0, i).find('.') != std::string::npos;
  if (unit.empty() && has_point) {
    if (!(value > 0 && value <= 1)) {
      return Error(StatusCode::kInvalid, "{} {}: a fraction of available memory is above 0 and at most "
                   "1.0 (a size takes a unit: 512MiB, 2G)", flag, text);
    }
    if (available_bytes <= 0) return Error(StatusCode::kInvalid, "{} {}: cannot read the available memory; give a size", flag, text);
    return static_cast<int64_t>(value * static_cast<double>(available_bytes));
  }
  double scale = 0;
  static const char kPrefixes[] = "KMGT";
  if (unit.empty()) {
    scale = 1;
  } else if (unit == "B") {
    scale = 1;
  } else {
    const char* p = std::strchr(kPrefixes, unit[0]);
    if (p == nullptr || *p == '\0') return bad();
    const int power = static_cast<int>(p - kPrefixes) + 1;
    const std::string rest = unit.substr(1);
    if (rest.empty() || rest == "IB") {
      scale = std::pow(1024.0, power);
    } else if (rest == "B") {
      scale = std::pow(1000.0, power);
    } else {
      return bad();
    }
  }
  const double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 1e15) return bad();
  return static_cast<int64_t>(bytes);
}

Result<EngineConfig> EngineOptions::to_config(const ModelConfig& model, const Tokenizer& tokenizer) const {
  EngineConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_batch_tokens = max_batch_tokens;
  c.max_queued_requests = max_queued_requests;
  c.block_size = block_size;
  c.kv_type = kv_cache_dtype == "f32" ? KvType::kF32 : KvType::kF16;
  c.coalesce = !no_coalesce;
  c.prefix_caching = !no_prefix_cache;
  c.kv_eviction = kv_eviction;
  c.spec = {.method = spec, .num_tokens = spec_tokens, .ngram_min = spec_ngram_min, .ngram_max = spec_ngram_max,
            .adaptive = spec_adaptive == "on"};
  if (spec.empty()) c.spec.method = draft_model.empty() ? "off" : "draft";
  if (!draft_model.empty() && spec == "off") {
    return Error(StatusCode::kInvalid, "--spec off and --draft-model: the draft model would never be used");
  }
  if (!draft_model.empty() && spec == "ngram") {
    return Error(StatusCode::kInvalid, "--spec ngram and --draft-model: one proposer at a time");
  }
  if (draft_model.empty() && spec == "draft") return Error(StatusCode::kInvalid, "--spec draft needs --draft-model FILE");
  // Settings of a proposer that is off would be ignored without a word.
  const EngineOptions defaults;
  if (c.spec.method != "ngram" && ngram_given) {
    return Error(StatusCode::kInvalid, "--spec-ngram-min and --spec-ngram-max set prompt lookup, which is off here: "
                 "add --spec ngram");
  }
  if (draft_model.empty() && draft_kv_given) {
    return Error(StatusCode::kInvalid, "--draft-kv-cache-memory sizes a draft model's cache: give --draft-model FILE");
  }
  if (spec_ngram_min > spec_ngram_max) {
    return Error(StatusCode::kInvalid, "--spec-ngram-min ({}) must not exceed --spec-ngram-max ({})", spec_ngram_min,
                 spec_ngram_max);
  }
  if (!pin_prefixes.empty() && kv_eviction != "pinned") {
    return Error(StatusCode::kInvalid, "--pin-prefix needs --kv-eviction pinned");
  }
  // The eviction policy is the prefix cache's: without the cache it would choose nothing.
  if (no_prefix_cache && kv_eviction != defaults.kv_eviction) {
    return Error(StatusCode::kInvalid, "--kv-eviction {} chooses what the prefix cache evicts, and --no-prefix-cache "
                 "turns that cache off", kv_eviction);
  }
  if (pin_prefixes.size() > 64) return Error(StatusCode::kInvalid, "at most 64 --pin-prefix prefixes");
  for (const std::string& text : pin_prefixes) {
    auto tokens = tokenizer.encode(text);
    if (!tokens) return Error(StatusCode::kInvalid, "--pin-prefix: {}", tokens.error().message());
    // Only whole blocks are cached, and no prompt is longer than the context: a prefix under a
    // block would pin nothing, one past the context blocks that no request can reach whole.
    std::string shown = text.substr(0, 40);
    shown.resize(shown.size() - utf8_incomplete_suffix_length(shown));  // cut on a character
    if (shown.size() < text.size()) shown += "...";
    if (std::ssize(*tokens) < block_size) {
      return Error(StatusCode::kInvalid, "--pin-prefix '{}' is {} tokens, under one KV block of {}: only whole blocks "
                   "are cached, so it would pin nothing (give a longer prefix or a smaller --block-size)",
                   shown, tokens->size(), block_size);
    }
    if (std::ssize(*tokens) > model.context_length) {
      return Error(StatusCode::kInvalid, "--pin-prefix '{}' is {} tokens, past the model's context of {}: no prompt "
                   "can hold it", shown, tokens->size(), model.context_length);
    }
    c.pinned_prefixes.push_back(std::move(*tokens));
  }
  if (block_size != defaults.block_size && block_size > model.context_length) {
    std::cerr << fmt::format("warning: --block-size {} is past the model's context of {} tokens: no sequence fills "
                             "a block, so the prefix cache never hits, and each sequence holds a whole block\n",
                             block_size, model.context_length);
  }
  const int64_t available = available_memory_bytes();
  if (kv_cache_memory == "auto") {
    const int64_t per_token = static_cast<int64_t>(KvPool::bytes_per_token(model, c.kv_type));
    const int64_t blocks_per_seq = (model.context_length + block_size - 1) / block_size;
    int64_t want = int64_t{max_num_seqs} * blocks_per_seq * block_size * per_token;
    if (available > 0) want = std::min(want, available * 2 / 5);
    c.kv_cache_bytes = std::max<int64_t>(want, per_token * block_size);
  } else {
    SLUICE_ASSIGN_OR_RETURN(c.kv_cache_bytes, parse_memory_size(kv_cache_memory, available));
  }
  return c;
}

Status EngineOptions::attach_draft(EngineConfig& config, LoadedModel& draft, const std::string& target_path) const {
  if (draft_model.empty()) return Status::ok();
  if (same_file(draft_model, target_path) || same_bytes(draft_model, target_path)) {
    return Status::error(fmt::format("--draft-model {} is the target model itself: each draft step would cost a "
                                     "target step, so speculation could only slow decoding (--spec ngram drafts "
                                     "without a second model)",
                                     draft_model),
                         StatusCode::kInvalid);
  }
  std::error_code ec_draft, ec_target;
  const auto draft_size = std::filesystem::file_size(draft_model, ec_draft);
  const auto target_size = std::filesystem::file_size(target_path, ec_target);
  if (!ec_draft && !ec_target && draft_size >= target_size) {
    std::cerr << fmt::format("warning: the draft model ({:.1f} MiB) is no smaller than the target ({:.1f} MiB): a "
                             "draft step reads as many weights as a target step, so speculation will likely slow "
                             "decoding\n",
                             static_cast<double>(draft_size) / (1024.0 * 1024.0),
                             static_cast<double>(target_size) / (1024.0 * 1024.0));
  }
  auto loaded = load_model(draft_model, {});
  // A file that cannot be read is a bad file (exit 1), as the model's own, not a bad command line.
  if (!loaded) return Status::error(fmt::format("--draft-model: {}", loaded.error().message()));
  draft = std::move(*loaded);
  const ModelConfig& dc = draft.model->config();
  const int64_t available = available_memory_bytes();
  int64_t bytes = 0;
  if (draft_kv_cache_memory == "auto") {
    const int64_t per_token = static_cast<int64_t>(KvPool::bytes_per_token(dc, config.kv_type));
    const int64_t blocks_per_seq = (dc.context_length + config.block_size - 1) / config.block_size + 1;
    bytes = int64_t{config.max_num_seqs} * blocks_per_seq * config.block_size * per_token;
    if (available > 0) bytes = std::min(bytes, available / 10);
    bytes = std::max<int64_t>(bytes, per_token * config.block_size);
  } else {
    auto parsed = parse_memory_size(draft_kv_cache_memory, available, "--draft-kv-cache-memory");
    if (!parsed) return parsed.error();
    bytes = *parsed;
  }
  config.spec.draft_model = draft.model.get();
  config.spec.draft_tokenizer = draft.tokenizer.get();
  config.spec.draft_kv_cache_bytes = bytes;
  return Status::ok();
}

std::string describe_spec(const Engine& engine, const std::string& draft_path) {
  const SpecConfig& s = engine.config().spec;
  std::string out = "speculative decoding: ";
  if (s.method == "off") {
    // Only predicted outputs are drafted then: the draft settings are theirs.
    return out + fmt::format("off (a request's prediction is still drafted: up to {} tokens a step, adaptive {})",
                             s.num_tokens, s.adaptive ? "on" : "off");
  } else if (s.method == "ngram") {
    out += fmt::format("prompt lookup, suffixes of {} to {} tokens", s.ngram_min, s.ngram_max);
  } else {
    out += fmt::format("draft model {} (KV cache {:.1f} MiB)", draft_path,
                       static_cast<double>(engine.draft_kv_cache_bytes()) / (1024.0 * 1024.0));
  }
  return out + fmt::format(", up to {} drafts a step, adaptive {}", s.num_tokens, s.adaptive ? "on" : "off");
}

std::string describe_kernels(const Model& model) {
  std::string out = kernels::describe_kernel_paths();
  const ModelWeights& w = model.weights();
  if (!w.repack_note.empty()) out += "\n" + w.repack_note;
  if (!w.packed.empty()) {
    size_t tiles = 0, lean = 0;
    for (const auto& p : w.packed) {
      tiles += p->tile_bytes();
      lean += p->lean_bytes();
    }
    constexpr double kMiB = 1024.0 * 1024.0;
    // The avx512, avxvnni and avx2 paths keep the lean form only; the amx path the tile form too.
    const std::string forms =
        tiles > 0 ? fmt::format("lean form {:.1f}, tile form {:.1f}", lean / kMiB, tiles / kMiB) : "the lean form";
    out += fmt::format("\nweights repacked: {} matrices, {:.1f} MiB ({}) beside the file's {:.1f} MiB", w.packed.size(),
                       (tiles + lean) / kMiB, forms, static_cast<double>(model.file().file_size()) / kMiB);
  }
  return out;
}

std::string describe_kv_cache(const Engine& engine, const ModelConfig& model) {
  const KvType type = engine.config().kv_type;
  // Under 0.1 MiB (a cache of a few blocks, in tests) in KiB, not as "0.0 MiB".
  const double bytes = static_cast<double>(engine.kv_cache_bytes());
  const std::string size = bytes < 0.1 * 1024 * 1024 ? fmt::format("{:.1f} KiB", bytes / 1024.0)
                                                     : fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0));
  std::string out = fmt::format("KV cache: {} {}, {} blocks of {} = {} tokens ({} bytes per token)", size,
                                kernels::kv_type_name(type), engine.num_kv_blocks(), engine.config().block_size,
                                engine.kv_capacity_tokens(), KvPool::bytes_per_token(model, type));
  // A sequence on none of the pinned prefixes cannot count on their blocks.
  const int64_t unpinned = engine.kv_capacity_tokens(std::span<const int32_t>{});
  if (unpinned < engine.kv_capacity_tokens()) {
    out += fmt::format("; the pinned prefixes keep up to {} of them", engine.kv_capacity_tokens() - unpinned);
  }
  if (unpinned < model.context_length) {
    // The cache, not the model, then bounds a sequence: said at start, not found out later.
    out += fmt::format("\nwarning: the KV cache holds fewer tokens than the model's context ({}): a sequence ends at "
                       "{} tokens, prompt included (finish reason 'length'){}; give more --kv-cache-memory for the "
                       "whole context",
                       model.context_length, engine.max_sequence_tokens(std::span<const int32_t>{}),
                       unpinned < engine.kv_capacity_tokens() ? " unless it is on a pinned prefix" : "");
  }
  return out;
}

}  // namespace sluice::cli
