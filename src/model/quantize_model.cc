#include "model/quantize_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>

#include "gguf/gguf_writer.h"
#include "kernels/matmul.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "model/config.h"

namespace sluice {
namespace {

using gguf::TensorType;

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// Whether a tensor is a matrix the mix quantizes (norms and 1-D tensors keep their type).
bool quantizable(const gguf::TensorInfo& t) {
  return t.dims.size() >= 2 && t.name.ends_with("weight") && !contains(t.name, "_norm");
}

// The state llama.cpp's choice walks the tensors with.
struct Walk {
  int n_layer = 0;
  int n_gqa = 1;
  bool has_output = false;
  int i_attention_wv = 0;
  int i_ffn_down = 0;
};

TensorType choose(std::string_view mix, TensorType base, std::string_view name, Walk& w) {
  const bool is_output = name == "output.weight" || (!w.has_output && name == "token_embd.weight");
  if (is_output) return base == TensorType::kQ8_0 ? TensorType::kQ8_0 : TensorType::kQ6_K;
  if (contains(name, "attn_v.weight")) {
    const int i = w.i_attention_wv++;
    if (mix == "q2_k") return w.n_gqa >= 4 ? TensorType::kQ4_K : TensorType::kQ3_K;
    if (mix == "q3_k_m") return i < 2 ? TensorType::kQ5_K : TensorType::kQ4_K;
    if ((mix == "iq4_xs" || mix == "iq4_nl") && w.n_gqa >= 4) return TensorType::kQ5_K;
    if ((mix == "q4_k_m" || mix == "q5_k_m") && use_more_bits(i, w.n_layer)) return TensorType::kQ6_K;
    if (mix == "q4_k_s" && i < 4) return TensorType::kQ5_K;
    return base;
  }
  if (contains(name, "ffn_down")) {
    const int i = w.i_ffn_down++;
    if (mix == "q2_k") return TensorType::kQ3_K;
    if (mix == "q3_k_m") return i < w.n_layer / 16 ? TensorType::kQ5_K : TensorType::kQ4_K;
    if ((mix == "q4_k_m" || mix == "q5_k_m") && use_more_bits(i, w.n_layer)) return TensorType::kQ6_K;
    if (mix == "q4_k_s" && i < w.n_layer / 8) return TensorType::kQ5_K;
    return base;
  }
  if (contains(name, "attn_output.weight")) {
    if (mix == "q2_k") return TensorType::kQ3_K;
    if (mix == "q3_k_m") return TensorType::kQ4_K;
    return base;
  }
  return base;
}

// A type whose blocks fit rows of `cols`, as llama.cpp falls back.
TensorType fallback(TensorType t, uint64_t cols) {
  auto fits = [&](TensorType u) { return cols % kernels::block_elements(u) == 0; };
  if (fits(t)) return t;
  switch (t) {
    case TensorType::kQ2_K: case TensorType::kQ3_K: case TensorType::kIQ4_XS: t = TensorType::kIQ4_NL; break;
    case TensorType::kQ4_K: t = TensorType::kQ5_0; break;
    case TensorType::kQ5_K: t = TensorType::kQ5_1; break;
    case TensorType::kQ6_K: t = TensorType::kQ8_0; break;
    default: break;
  }
  return fits(t) ? t : TensorType::kF16;
}

Result<Walk> start_walk(const gguf::File& in) {
  if (in.tensors().empty()) return Error("the file holds no tensors (a vocabulary-only file?): nothing to quantize");
  auto config = ModelConfig::from_gguf(in);
  if (!config) return Error("cannot read the model's configuration: {}", config.error().message());
  Walk w;
  w.n_layer = config->num_layers;
  w.n_gqa = config->num_kv_heads > 0 ? config->num_heads / config->num_kv_heads : 1;
  w.has_output = in.find_tensor("output.weight") != nullptr;
  return w;
}

}  // namespace

const std::vector<QuantMix>& quant_mixes() {
  static const std::vector<QuantMix> kMixes = {
      {"q8_0", 7, TensorType::kQ8_0, "8.5 bits per weight, round to nearest"},
      {"q6_k", 18, TensorType::kQ6_K, "6.56 bits"},
      {"q5_k_m", 17, TensorType::kQ5_K, "5.5 bits; some attn_v and ffn_down in Q6_K"},
      {"q5_1", 9, TensorType::kQ5_1, "6 bits, round to nearest"},
      {"q5_0", 8, TensorType::kQ5_0, "5.5 bits, round to nearest"},
      {"q4_k_m", 15, TensorType::kQ4_K, "4.5 bits; some attn_v and ffn_down in Q6_K"},
      {"q4_k_s", 14, TensorType::kQ4_K, "4.5 bits; attn_v of the first 4 layers and ffn_down of the first eighth in Q5_K"},
      {"q4_1", 3, TensorType::kQ4_1, "5 bits, round to nearest"},
      {"q4_0", 2, TensorType::kQ4_0, "4.5 bits, round to nearest"},
      {"iq4_xs", 30, TensorType::kIQ4_XS, "4.25 bits, non-linear levels"},
      {"q3_k_m", 12, TensorType::kQ3_K, "3.44 bits; attn_v, attn_output, ffn_down in Q4_K/Q5_K"},
      {"q2_k", 10, TensorType::kQ2_K, "2.63 bits; attn_v, attn_output, ffn_down in Q3_K"},
  };
  return kMixes;
}

Result<const QuantMix*> find_quant_mix(std::string_view name) {
  std::string names;
  for (const QuantMix& m : quant_mixes()) {
    if (m.name == name) return &m;
    names += names.empty() ? "" : ", ";
    names += m.name;
  }
  return Error("unknown quantization type '{}' (choose {})", name, names);
}

std::vector<std::pair<std::string, TensorType>> planned_types(const gguf::File& in, const QuantMix& mix) {
  std::vector<std::pair<std::string, TensorType>> out;
  auto walk = start_walk(in);
  if (!walk) return out;
  for (const auto& t : in.tensors()) {
    out.emplace_back(std::string(t.name), quantizable(t) ? choose(mix.name, mix.base, t.name, *walk) : t.type);
  }
  return out;
}

Result<QuantizeReport> quantize_model(const gguf::File& in, const QuantMix& mix, const std::string& out_path,
                                      ThreadPool& pool, const std::function<void(uint64_t, uint64_t)>& progress,
                                      const gguf::Writer::Verify& verify) {
  gguf::Writer w;
  auto report = quantize_into(in, mix, w, pool, progress);
  if (!report) return report;
  if (Status s = w.write_file(out_path, verify); !s) return Error(s);
  return report;
}

namespace {

// Lowers `a` to `v` if `v` is less (parallel loops looking for the first of something).
void keep_lowest(std::atomic<int64_t>& a, int64_t v) {
  int64_t seen = a.load();
  while (v < seen && !a.compare_exchange_weak(seen, v)) {
  }
}

// The float tensor `t` quantized to `type`.
Result<std::vector<uint8_t>> quantize_tensor(const gguf::TensorInfo& t, TensorType type, ThreadPool& pool) {
  const uint64_t cols = t.dims[0], rows = t.num_elements / cols;
  const uint64_t row_bytes = kernels::quantized_bytes(type, static_cast<int64_t>(cols));
  std::vector<uint8_t> bytes(row_bytes * rows);
  // Finite weights can still overflow a type's float16 scales (a weight past about 65504 x its
  // levels): each row is read back, and a row that reads as inf or NaN is refused, not written.
  std::atomic<int64_t> overflowed{static_cast<int64_t>(rows)};
  pool.parallel_for(
      static_cast<int64_t>(rows),
      [&](int64_t begin, int64_t end) {
        std::vector<float> row(cols), back(cols);
        const kernels::WeightView src{t.data, t.type, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
        const kernels::WeightView out{bytes.data(), type, static_cast<int64_t>(rows), static_cast<int64_t>(cols)};
        for (int64_t r = begin; r < end; ++r) {
          kernels::dequantize_row(src, r, row.data());
          kernels::quantize_row(type, row.data(), static_cast<int64_t>(cols), bytes.data() + r * row_bytes);
          kernels::dequantize_row(out, r, back.data());
          if (!std::all_of(back.begin(), back.end(), [](float v) { return std::isfinite(v); }))
            keep_lowest(overflowed, r);
        }
      },
      std::max<int64_t>(1, 4096 / static_cast<int64_t>(std::max<uint64_t>(1, cols / 64))));
  if (const int64_t r = overflowed.load(); r < static_cast<int64_t>(rows)) {
    std::vector<float> row(cols);
    kernels::dequantize_row({t.data, t.type, static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, r, row.data());
    const float largest =
        *std::max_element(row.begin(), row.end(), [](float a, float b) { return std::abs(a) < std::abs(b); });
    return Error(
        "tensor '{}' row {}: its largest weight, {}, is past what {} can hold{}: the model cannot be quantized to "
        "it (the weights are far outside what trained models hold)",
        t.name, r, largest, gguf::tensor_type_name(type),
        kernels::is_block_quant(type) ? " (its float16 scales overflow)" : "");
  }
  return bytes;
}

// A float tensor's first value that is not finite, as "row R, column C is V"; none if all are.
std::optional<std::string> first_non_finite(const gguf::TensorInfo& t, ThreadPool& pool) {
  if (t.type != TensorType::kF32 && t.type != TensorType::kF16 && t.type != TensorType::kBF16) return std::nullopt;
  const int64_t cols = static_cast<int64_t>(t.dims[0]), rows = static_cast<int64_t>(t.num_elements) / cols;
  const kernels::WeightView src{t.data, t.type, rows, cols};
  std::atomic<int64_t> first{rows};
  pool.parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = begin; r < end && r < first.load(); ++r) {
          kernels::dequantize_row(src, r, row.data());
          if (std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); })) continue;
          keep_lowest(first, r);
          return;
        }
      },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(1, cols / 64)));
  if (first.load() == rows) return std::nullopt;
  std::vector<float> row(static_cast<size_t>(cols));
  kernels::dequantize_row(src, first.load(), row.data());
  const auto at = std::find_if(row.begin(), row.end(), [](float v) { return !std::isfinite(v); });
  return fmt::format("row {}, column {} is {}", first.load(), at - row.begin(), *at);
}

}  // namespace

Result<QuantizeReport> quantize_into(const gguf::File& in, const QuantMix& mix, gguf::Writer& w, ThreadPool& pool,
                                     const std::function<void(uint64_t, uint64_t)>& progress) {
  auto walk = start_walk(in);
  if (!walk) return Error(walk.error());
  uint64_t total = 0;
  for (const auto& t : in.tensors()) {
    if (!quantizable(t)) continue;
    if (t.type != TensorType::kF32 && t.type != TensorType::kF16 && t.type != TensorType::kBF16) {
      return Error("tensor '{}' is {}: quantize from a file of F32, F16 or BF16 weights", t.name,
                   gguf::tensor_type_name(t.type));
    }
    total += t.num_elements;
  }
  // A weight that is inf or NaN makes every logit NaN: refused, as llama.cpp's quantizer does,
  // rather than written into a model that answers nonsense.
  for (const auto& t : in.tensors()) {
    if (auto bad = first_non_finite(t, pool)) {
      return Error("tensor '{}' has a value that is not finite ({}): the model is damaged", t.name, *bad);
    }
  }
  for (const auto& [key, value] : in.metadata()) w.set(std::string(key), gguf::to_owned(value));
  w.set_u32("general.file_type", mix.file_type);
  w.set_u32("general.quantization_version", 2);
  QuantizeReport report;
  uint64_t done = 0;
  for (const auto& t : in.tensors()) {
    report.input_bytes += t.num_bytes;
    if (!quantizable(t)) {
      w.add_tensor(std::string(t.name), t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
      auto& e = report.by_type[t.type];
      e.first += 1;
      e.second += t.num_bytes;
      report.output_bytes += t.num_bytes;
      continue;
    }
    const TensorType chosen = choose(mix.name, mix.base, t.name, *walk);
    const uint64_t cols = t.dims[0];
    const TensorType type = fallback(chosen, cols);
    if (type != chosen) {
      report.fallbacks.push_back(fmt::format("{}: {} cannot hold rows of {}; {} instead", t.name,
                                             gguf::tensor_type_name(chosen), cols, gguf::tensor_type_name(type)));
    }
    auto bytes = quantize_tensor(t, type, pool);
    if (!bytes) return Error(bytes.error());
    auto& e = report.by_type[type];
    e.first += 1;
    e.second += bytes->size();
    report.output_bytes += bytes->size();
    w.add_tensor(std::string(t.name), type, t.dims, std::move(*bytes));
    done += t.num_elements;
    if (progress) progress(done, total);
  }
  return report;
}

}  // namespace sluice
