#include "model/model_maker.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "common/meminfo.h"
#include "common/thread_pool.h"
#include "gguf/gguf_reader.h"
#include "kernels/quant_blocks.h"
#include "kernels/quantize.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer_metadata.h"

namespace sluice {
namespace {

// splitmix64: a small, fully specified generator, so made models are identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1p-52 - 1.0); }

 private:
  uint64_t state_;
};

std::vector<uint8_t> encode(const std::vector<float>& values, gguf::TensorType type) {
  std::vector<uint8_t> out(kernels::quantized_bytes(type, static_cast<int64_t>(values.size())));
  kernels::quantize_row(type, values.data(), static_cast<int64_t>(values.size()), out.data());
  return out;
}

// A [rows, cols] matrix encoded a row at a time on the pool: the same bytes as encode() (blocks
// never cross rows), in a fraction of the time for the types whose quantizers search (IQ4_XS's
// scale search took minutes for Qwen3-0.6B's 0.6 billion weights on one core). Ranges of at
// least 64K weights, so the small matrices of test models stay on the calling thread.
std::vector<uint8_t> encode_rows(ThreadPool& pool, const std::vector<float>& values, int64_t rows, int64_t cols,
                                 gguf::TensorType type) {
  const size_t row_bytes = kernels::quantized_bytes(type, cols);
  std::vector<uint8_t> out(row_bytes * rows);
  const auto encode_range = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      kernels::quantize_row(type, values.data() + r * cols, cols, out.data() + r * row_bytes);
    }
  };
  pool.parallel_for(rows, encode_range, std::max<int64_t>(1, (int64_t{1} << 16) / cols));
  return out;
}

// general.file_type of a file whose matrices are all `type` (llama.cpp's llama_ftype).
uint32_t file_type_of(gguf::TensorType type) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kF32: return 0;
    case T::kF16: return 1;
    case T::kQ4_0: return 2;
    case T::kQ4_1: return 3;
    case T::kQ8_0: return 7;
    case T::kQ5_0: return 8;
    case T::kQ5_1: return 9;
    case T::kQ2_K: return 10;
    case T::kQ3_K: return 11;  // Q3_K_S: every matrix Q3_K
    case T::kQ4_K: return 14;  // Q4_K_S
    case T::kQ5_K: return 16;  // Q5_K_S
    case T::kQ6_K: return 18;
    case T::kIQ4_NL: return 25;
    case T::kIQ4_XS: return 30;
    case T::kBF16: return 32;
    default: return 0;
  }
}

class TensorMaker {
 public:
  TensorMaker(gguf::Writer& w, const ModelSpec& spec) : w_(w), spec_(spec), rng_(spec.seed) {}

  // A [rows, cols] matrix with entries uniform in +-1/sqrt(cols), so activations keep their scale.
  void matrix(const std::string& name, int64_t rows, int64_t cols, float gain = 1.0f) {
    std::vector<float> v(rows * cols);
    const float scale = gain * std::sqrt(3.0f / static_cast<float>(cols));
    for (auto& x : v) x = rng_.symmetric() * scale;
    w_.add_tensor(name, spec_.dtype, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)},
                  encode_rows(pool_, v, rows, cols, spec_.dtype));
  }
  // Vectors stay F32, as in converted models.
  void vector(const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> v(n);
    for (auto& x : v) x = center + spread * rng_.symmetric();
    w_.add_tensor(name, gguf::TensorType::kF32, {static_cast<uint64_t>(n)}, encode(v, gguf::TensorType::kF32));
  }
  void raw_vector(const std::string& name, const std::vector<float>& v) {
    w_.add_tensor(name, gguf::TensorType::kF32, {v.size()}, encode(v, gguf::TensorType::kF32));
  }

 private:
  gguf::Writer& w_;
  const ModelSpec& spec_;
  Rng rng_;
  ThreadPool pool_;  // one thread a core
};

// The bytes TensorMaker would add, and its largest matrix's element count.
struct TensorCounter {
  explicit TensorCounter(const ModelSpec& spec) : spec(spec) {}
  void matrix(const std::string&, int64_t rows, int64_t cols, float = 1.0f) {
    bytes += gguf::tensor_num_bytes(spec.dtype, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
    largest_matrix_floats = std::max(largest_matrix_floats, static_cast<uint64_t>(rows * cols));
  }
  void vector(const std::string&, int64_t n, float, float) { bytes += 4 * static_cast<uint64_t>(n); }
  void raw_vector(const std::string&, const std::vector<float>& v) { bytes += 4 * v.size(); }

  const ModelSpec& spec;
  uint64_t bytes = 0, largest_matrix_floats = 0;
};

// Llama 3 rope scaling as frequency factors (factor 32, low_freq_factor 1, high_freq_factor 4,
// original context 8192), following Meta's published reference formula.
std::vector<float> llama3_freq_factors(int32_t rope_dim, float theta) {
  const double factor = 32, low = 1, high = 4, original = 8192;
  const double low_wavelen = original / low, high_wavelen = original / high;
  std::vector<float> out(rope_dim / 2);
  for (int32_t i = 0; i < rope_dim / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * i / rope_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      out[i] = static_cast<float>(factor);
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      out[i] = static_cast<float>(1.0 / ((1 - smooth) / factor + smooth));
    }
  }
  return out;
}

Status write_tokenizer(gguf::Writer& w, ModelSpec& spec) {
  if (spec.vocab_file.empty()) {
    write_synthetic_bpe_vocab(w, spec.vocab_size, spec.seed);
    return Status::ok();
  }
  auto file = gguf::File::open(spec.vocab_file);
  if (!file) return file.error().with_context("--vocab");
  auto tokens = (*file)->get_array("tokenizer.ggml.tokens", gguf::ValueType::kString);
  if (!tokens) return tokens.error().with_context(spec.vocab_file);
  copy_tokenizer_metadata(**file, w);
  spec.vocab_size = static_cast<int32_t>((*tokens)->count);
  return Status::ok();
}

}  // namespace

// Messages name the `sluice model make` flag of each field.
Status ModelSpec::validate() const {
  auto bad = [](std::string m) { return Status::error(std::move(m)); };
  if (num_layers < 1 || num_layers > 256) return bad(fmt::format("--layers must be in 1..256, got {}", num_layers));
  if (dim < 8 || dim > 65536) return bad(fmt::format("--dim must be in 8..65536, got {}", dim));
  if (ffn_dim < 1 || ffn_dim > 262144) return bad(fmt::format("--ffn must be in 1..262144, got {}", ffn_dim));
  if (num_heads < 1 || num_kv_heads < 1 || num_heads % num_kv_heads != 0) {
    return bad(fmt::format("--heads ({}) must be a positive multiple of --kv-heads ({})", num_heads, num_kv_heads));
  }
  if (head_dim != 0) {
    if (head_dim < 2 || head_dim % 2 != 0 || head_dim > 1024) {
      return bad(fmt::format("--head-dim must be even and in 2..1024, got {}", head_dim));
    }
  } else if (dim % num_heads != 0 || (dim / num_heads) % 2 != 0) {
    return bad(fmt::format("--dim {} / --heads {} must be a whole, even head size (or give --head-dim)", dim, num_heads));
  }
  const int32_t hd = head_dim ? head_dim : dim / num_heads;
  if (vocab_file.empty() && (vocab_size < kSyntheticMinVocabSize || vocab_size > (1 << 22))) {
    return bad(fmt::format("--vocab-size must be in {}..{}, got {}", kSyntheticMinVocabSize, 1 << 22, vocab_size));
  }
  if (context_length < 2 || context_length > (1 << 24)) {  // a prompt of one token, and one generated
    return bad(fmt::format("--ctx must be in 2..{}, got {}", 1 << 24, context_length));
  }
  if (!(rope_theta > 1 && std::isfinite(rope_theta))) {
    return bad(fmt::format("--rope-theta must be a finite number > 1, got {}", rope_theta));
  }
  if (!(rms_eps > 0 && rms_eps < 1)) return bad(fmt::format("rms epsilon must be in (0, 1), got {}", rms_eps));
  if (kernels::is_block_quant(dtype)) {
    const int block = kernels::block_elements(dtype);
    for (int32_t n : {dim, ffn_dim, num_heads * hd}) {
      if (n % block != 0) {
        return bad(fmt::format("{} needs every matrix row length to be a multiple of {}; {} is not",
                               gguf::tensor_type_name(dtype), block, n));
      }
    }
  }
  return Status::ok();
}

const std::vector<Preset>& model_presets() {
  static const std::vector<Preset> kPresets = [] {
    std::vector<Preset> p;
    ModelSpec tiny;
    tiny.name = "tiny";
    p.push_back({"tiny", "2 layers, dim 64, 4 heads (2 kv), ffn 128, vocab 512 — unit tests", tiny});
    ModelSpec small = tiny;
    small.name = "small";
    small.num_layers = 4, small.dim = 256, small.ffn_dim = 768, small.num_heads = 8, small.num_kv_heads = 4;
    small.vocab_size = 4096, small.context_length = 2048;
    p.push_back({"small", "4 layers, dim 256, 8 heads (4 kv), ffn 768, vocab 4096 — demo and quick benchmarks", small});
    ModelSpec qwen = tiny;
    qwen.name = "qwen2.5-0.5b", qwen.arch = Arch::kQwen2;
    qwen.num_layers = 24, qwen.dim = 896, qwen.ffn_dim = 4864, qwen.num_heads = 14, qwen.num_kv_heads = 2;
    qwen.vocab_size = 151936, qwen.context_length = 32768, qwen.rope_theta = 1e6f, qwen.rms_eps = 1e-6f;
    qwen.tied_embeddings = true;
    p.push_back({"qwen2.5-0.5b", "shape of Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads (2 kv), ffn 4864, vocab 151936, tied", qwen});
    ModelSpec qwen3 = qwen;
    qwen3.name = "qwen3-0.6b", qwen3.arch = Arch::kQwen3;
    qwen3.num_layers = 28, qwen3.dim = 1024, qwen3.ffn_dim = 3072, qwen3.num_heads = 16, qwen3.num_kv_heads = 8;
    qwen3.head_dim = 128, qwen3.context_length = 40960;
    p.push_back({"qwen3-0.6b", "shape of Qwen3-0.6B: 28 layers, hidden 1024, 16 heads (8 kv) of 128, ffn 3072, vocab 151936, tied", qwen3});
    ModelSpec llama = tiny;
    llama.name = "llama-3.2-1b", llama.arch = Arch::kLlama;
    llama.num_layers = 16, llama.dim = 2048, llama.ffn_dim = 8192, llama.num_heads = 32, llama.num_kv_heads = 8;
    llama.vocab_size = 128256, llama.context_length = 131072, llama.rope_theta = 500000.0f;
    llama.tied_embeddings = true, llama.llama3_rope = true;
    p.push_back({"llama-3.2-1b", "shape of Llama-3.2-1B: 16 layers, hidden 2048, 32 heads (8 kv), ffn 8192, vocab 128256, tied, llama3 rope", llama});
    return p;
  }();
  return kPresets;
}

Result<ModelSpec> preset_spec(std::string_view name) {
  std::string names;
  for (const auto& p : model_presets()) {
    if (p.name == name) return p.spec;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return Error("unknown preset '{}' (presets: {})", name, names);
}

ModelSpec demo_model_spec() {
  ModelSpec spec = *preset_spec("small");
  spec.name = "sluice-demo";
  spec.seed = 42;
  spec.demo = true;
  return spec;
}

// Every tensor of the model, in the file's order, through `t` (a TensorMaker, or a TensorCounter).
template <class Tensors>
void add_tensors(Tensors& t, const ModelSpec& spec, int32_t head_dim) {
  const int64_t q_dim = int64_t{spec.num_heads} * head_dim, kv_dim = int64_t{spec.num_kv_heads} * head_dim;
  t.matrix("token_embd.weight", spec.vocab_size, spec.dim, std::sqrt(static_cast<float>(spec.dim)) / 4);
  if (spec.llama3_rope) t.raw_vector("rope_freqs.weight", llama3_freq_factors(head_dim, spec.rope_theta));
  for (int32_t i = 0; i < spec.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    t.vector(p + "attn_norm.weight", spec.dim, 1.0f, 0.1f);
    t.matrix(p + "attn_q.weight", q_dim, spec.dim, 2.0f);
    t.matrix(p + "attn_k.weight", kv_dim, spec.dim, 2.0f);
    t.matrix(p + "attn_v.weight", kv_dim, spec.dim);
    t.matrix(p + "attn_output.weight", spec.dim, q_dim);
    if (spec.arch == Arch::kQwen2) {
      t.vector(p + "attn_q.bias", q_dim, 0.0f, 0.1f);
      t.vector(p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      t.vector(p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (spec.arch == Arch::kQwen3) {
      t.vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.1f);
      t.vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.1f);
    }
    t.vector(p + "ffn_norm.weight", spec.dim, 1.0f, 0.1f);
    t.matrix(p + "ffn_gate.weight", spec.ffn_dim, spec.dim);
    t.matrix(p + "ffn_up.weight", spec.ffn_dim, spec.dim);
    t.matrix(p + "ffn_down.weight", spec.dim, spec.ffn_dim);
  }
  t.vector("output_norm.weight", spec.dim, 1.0f, 0.1f);
  if (!spec.tied_embeddings) t.matrix("output.weight", spec.vocab_size, spec.dim, 4.0f);
}

// What making the model takes: the file's bytes in memory, and the largest matrix as floats before
// it is encoded (a shape the flags allow can be terabytes: refused before any of it is made).
Status fits_in_memory(const ModelSpec& spec, int32_t head_dim) {
  TensorCounter counted(spec);
  add_tensors(counted, spec, head_dim);
  const uint64_t need = counted.bytes + counted.largest_matrix_floats * sizeof(float);
  const int64_t available = available_memory_bytes();
  if (available <= 0 || need <= static_cast<uint64_t>(available)) return Status::ok();
  return Status::error(fmt::format("this model would take {:.1f} GiB of memory to make ({:.1f} GiB of weights), more "
                                   "than the {:.1f} GiB available: give a smaller shape",
                                   need / 1073741824.0, counted.bytes / 1073741824.0, available / 1073741824.0));
}

Result<gguf::Writer> make_model(const ModelSpec& in) {
  ModelSpec spec = in;
  if (Status s = spec.validate(); !s) return Error(s);
  gguf::Writer w;
  const std::string a(arch_name(spec.arch));
  const int32_t head_dim = spec.head_dim ? spec.head_dim : spec.dim / spec.num_heads;
  w.set_string("general.architecture", a);
  w.set_string("general.name", spec.demo ? "sluice demo model (random weights: its output is gibberish)"
                                         : fmt::format("sluice random {}", spec.name));
  w.set_string("general.description", "random weights made by `sluice model make`; for tests and benchmarks");
  if (spec.demo) w.set_bool("sluice.demo", true);
  w.set_u32("general.file_type", file_type_of(spec.dtype));
  if (spec.vocab_file.empty()) {  // (a copied vocabulary's size is known once it is read)
    if (Status s = fits_in_memory(spec, head_dim); !s) return Error(s);
  }
  if (Status s = write_tokenizer(w, spec); !s) return Error(s);
  w.set_u32(a + ".block_count", spec.num_layers);
  w.set_u32(a + ".embedding_length", spec.dim);
  w.set_u32(a + ".feed_forward_length", spec.ffn_dim);
  w.set_u32(a + ".attention.head_count", spec.num_heads);
  w.set_u32(a + ".attention.head_count_kv", spec.num_kv_heads);
  if (spec.head_dim) {
    w.set_u32(a + ".attention.key_length", head_dim);
    w.set_u32(a + ".attention.value_length", head_dim);
  }
  w.set_u32(a + ".context_length", spec.context_length);
  w.set_f32(a + ".rope.freq_base", spec.rope_theta);
  w.set_u32(a + ".rope.dimension_count", head_dim);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", spec.rms_eps);

  if (!spec.vocab_file.empty()) {
    if (Status s = fits_in_memory(spec, head_dim); !s) return Error(s);
  }
  TensorMaker t(w, spec);
  add_tensors(t, spec, head_dim);
  return w;
}

}  // namespace sluice
