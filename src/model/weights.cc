#include "model/weights.h"

#include <charconv>
#include <cstring>
#include <set>
#include <string_view>

#include "common/half.h"

namespace sluice {
namespace {

class Binder {
 public:
  Binder(const gguf::File& f, ModelWeights& w) : f_(f), w_(w) {}

  Result<kernels::WeightView> matrix(const std::string& name, int64_t rows, int64_t cols) {
    const gguf::TensorInfo* t = find(name);
    if (!t) return Error("missing tensor '{}'", name);
    if (t->dims.size() != 2 || t->dims[0] != static_cast<uint64_t>(cols) ||
        t->dims[1] != static_cast<uint64_t>(rows)) {
      return Error("tensor '{}' has shape {}, expected [{}, {}]", name, t->shape_string(), cols, rows);
    }
    if (!kernels::weight_type_supported(t->type)) {
      return Error(
          "tensor '{}' has type {}, which sluice does not compute (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
          "Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)",
                   name, gguf::tensor_type_name(t->type));
    }
    return kernels::WeightView{t->data, t->type, rows, cols};
  }

  Result<const float*> vector(const std::string& name, int64_t n) {
    const gguf::TensorInfo* t = find(name);
    if (!t) return Error("missing tensor '{}'", name);
    if (t->num_elements != static_cast<uint64_t>(n) || t->dims[0] != static_cast<uint64_t>(n)) {
      return Error("tensor '{}' has shape {}, expected [{}]", name, t->shape_string(), n);
    }
    auto out = std::make_unique<std::vector<float>>(n);
    switch (t->type) {
      case gguf::TensorType::kF32:
        // Views need 4-byte alignment; GGUF data offsets are aligned, so this holds for real files.
        if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) return reinterpret_cast<const float*>(t->data);
        std::memcpy(out->data(), t->data, n * sizeof(float));
        break;
      case gguf::TensorType::kF16:
      case gguf::TensorType::kBF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, t->data + 2 * i, 2);
          (*out)[i] = t->type == gguf::TensorType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        break;
      default:
        return Error("tensor '{}' has type {}, expected F32, F16 or BF16 for a vector", name,
                     gguf::tensor_type_name(t->type));
    }
    w_.owned.push_back(std::move(out));
    return w_.owned.back()->data();
  }

  Result<const float*> optional_vector(const std::string& name, int64_t n) {
    if (!f_.find_tensor(name)) return nullptr;
    return vector(name, n);
  }

  // A tensor of the file that no call above asked for: the model would run without it, so the
  // answers would not be the weights'. Either the metadata says fewer layers than the file holds,
  // or the tensor is one sluice does not compute (a variant's: llama's attn_output and ffn biases).
  Status check_all_used(const ModelConfig& c) const {
    int unused = 0;
    std::string first;
    for (const gguf::TensorInfo& t : f_.tensors()) {
      if (used_.contains(t.name)) continue;
      int layer = -1;
      if (t.name.starts_with("blk.")) {
        std::from_chars(t.name.data() + 4, t.name.data() + t.name.size(), layer);
      }
      if (layer >= c.num_layers) {
        return Status::error(
            fmt::format("the file holds weights of more layers than {}.block_count says ({}): "
                        "'{}' would be left out",
                        c.arch_name, c.num_layers, t.name));
      }
      if (unused++ == 0) first = std::string(t.name);
    }
    if (unused == 0) return Status::ok();
    return Status::error(
        fmt::format("tensor '{}'{} is not one sluice computes for a {} model: it would be left out, "
                    "and the answers would not be the model's",
                    first, unused == 1 ? "" : fmt::format(" (and {} more)", unused - 1), c.arch_name));
  }

 private:
  const gguf::TensorInfo* find(const std::string& name) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (t) used_.insert(t->name);
    return t;
  }

  const gguf::File& f_;
  ModelWeights& w_;
  std::set<std::string_view> used_;
};

}  // namespace

Result<ModelWeights> ModelWeights::bind(const gguf::File& f, const ModelConfig& c) {
  ModelWeights w;
  Binder b(f, w);
  SLUICE_ASSIGN_OR_RETURN(w.token_embd, b.matrix("token_embd.weight", c.vocab_size, c.dim));
  SLUICE_ASSIGN_OR_RETURN(w.output_norm, b.vector("output_norm.weight", c.dim));
  if (c.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    SLUICE_ASSIGN_OR_RETURN(w.output, b.matrix("output.weight", c.vocab_size, c.dim));
  }
  if (c.has_rope_freq_factors) {
    SLUICE_ASSIGN_OR_RETURN(w.rope_freq_factors, b.vector("rope_freqs.weight", c.rope_dim / 2));
  }
  for (int32_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    SLUICE_ASSIGN_OR_RETURN(l.attn_norm, b.vector(p + "attn_norm.weight", c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.wq, b.matrix(p + "attn_q.weight", c.q_dim(), c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.wk, b.matrix(p + "attn_k.weight", c.kv_dim(), c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.wv, b.matrix(p + "attn_v.weight", c.kv_dim(), c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.wo, b.matrix(p + "attn_output.weight", c.dim, c.q_dim()));
    if (c.arch == Arch::kQwen2) {
      SLUICE_ASSIGN_OR_RETURN(l.bq, b.vector(p + "attn_q.bias", c.q_dim()));
      SLUICE_ASSIGN_OR_RETURN(l.bk, b.vector(p + "attn_k.bias", c.kv_dim()));
      SLUICE_ASSIGN_OR_RETURN(l.bv, b.vector(p + "attn_v.bias", c.kv_dim()));
    } else {
      // Some llama-architecture models (e.g. converted fine-tunes) carry biases too.
      SLUICE_ASSIGN_OR_RETURN(l.bq, b.optional_vector(p + "attn_q.bias", c.q_dim()));
      SLUICE_ASSIGN_OR_RETURN(l.bk, b.optional_vector(p + "attn_k.bias", c.kv_dim()));
      SLUICE_ASSIGN_OR_RETURN(l.bv, b.optional_vector(p + "attn_v.bias", c.kv_dim()));
    }
    if (c.arch == Arch::kQwen3) {
      SLUICE_ASSIGN_OR_RETURN(l.q_norm, b.vector(p + "attn_q_norm.weight", c.head_dim));
      SLUICE_ASSIGN_OR_RETURN(l.k_norm, b.vector(p + "attn_k_norm.weight", c.head_dim));
    }
    SLUICE_ASSIGN_OR_RETURN(l.ffn_norm, b.vector(p + "ffn_norm.weight", c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.gate, b.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.up, b.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim));
    SLUICE_ASSIGN_OR_RETURN(l.down, b.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim));
    w.layers.push_back(l);
  }
  if (Status s = b.check_all_used(c); !s) return Error(s);
  return w;
}

void ModelWeights::repack(ThreadPool& pool, size_t budget, bool tile_form) {
  std::vector<kernels::WeightView*> views;
  auto add = [&](kernels::WeightView& w) {
    if (!kernels::PackedWeight::packs(w.type)) return;
    for (const kernels::WeightView* v : views) {
      if (v->data == w.data) return;
    }
    views.push_back(&w);
  };
  add(output);
  for (LayerWeights& l : layers) {
    for (kernels::WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) add(*w);
  }
  if (views.empty()) return;
  size_t both = 0, lean = 0;
  for (const kernels::WeightView* w : views) {
    both += kernels::PackedWeight::planned_bytes(*w, {true, true});
    lean += kernels::PackedWeight::planned_bytes(*w, {false, true});
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  kernels::PackedWeight::Forms forms;
  forms.tiles = tile_form;
  if (!tile_form) both = lean;
  if (both > budget) {
    forms.tiles = false;
    if (lean > budget || lean == 0) {
      const std::string copies = tile_form ? fmt::format("the copies ({:.1f} MiB, or {:.1f} for the lean form)", both / kMiB,
                                                         lean / kMiB)
                                           : fmt::format("the lean form ({:.1f} MiB)", lean / kMiB);
      repack_note = fmt::format("weights not repacked: {} would pass the budget of {:.1f} MiB (half the available "
                                "memory; SLUICE_REPACK=on forces them)",
                                copies, budget / kMiB);
      return;
    }
    repack_note = fmt::format("the tile form ({:.1f} MiB more) is not kept: it would pass the budget of {:.1f} MiB "
                              "(half the available memory; SLUICE_REPACK=on forces it), so batches decode at run time",
                              (both - lean) / kMiB, budget / kMiB);
  }
  for (kernels::WeightView* w : views) {
    if (kernels::PackedWeight::planned_bytes(*w, forms) == 0) continue;  // no form of this type kept
    packed.push_back(kernels::PackedWeight::pack(*w, pool, forms));
    w->packed = packed.back().get();
  }
  if (output.data == token_embd.data) token_embd.packed = output.packed;
}

size_t ModelWeights::packed_bytes() const {
  size_t n = 0;
  for (const auto& p : packed) n += p->bytes();
  return n;
}

}  // namespace sluice
