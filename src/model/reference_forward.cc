#include "model/reference_forward.h"

#include <cmath>
#include <cstring>
#include <string>

#include "common/half.h"
#include "kernels/quant_blocks.h"

namespace sluice::testing {
namespace {

using Mat = std::vector<double>;  // row-major [rows, cols]

Mat load(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return {};
  Mat out(t->num_elements);
  const uint8_t* p = t->data;
  if (t->type != gguf::TensorType::kQ8_0 && kernels::is_block_quant(t->type)) {
    // Blocks are contiguous across rows: the tensor reads as one long row.
    float values[kernels::kSubBlock];
    for (uint64_t b = 0; b < t->num_elements / kernels::kSubBlock; ++b) {
      kernels::dequantize_block32(t->type, p, static_cast<int64_t>(b), values);
      for (int k = 0; k < kernels::kSubBlock; ++k) out[b * kernels::kSubBlock + k] = values[k];
    }
    return out;
  }
  for (uint64_t i = 0; i < t->num_elements; ++i) {
    switch (t->type) {
      case gguf::TensorType::kF32: { float v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; break; }
      case gguf::TensorType::kF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = f16_to_f32(h); break; }
      case gguf::TensorType::kBF16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = bf16_to_f32(h); break; }
      case gguf::TensorType::kQ8_0: {
        const uint8_t* block = p + (i / 32) * 34;
        uint16_t d;
        std::memcpy(&d, block, 2);
        out[i] = static_cast<double>(f16_to_f32(d)) * static_cast<int8_t>(block[2 + i % 32]);
        break;
      }
      default: return {};
    }
  }
  return out;
}

std::vector<double> matvec(const Mat& w, const std::vector<double>& x, size_t rows) {
  const size_t cols = x.size();
  std::vector<double> y(rows, 0.0);
  for (size_t n = 0; n < rows; ++n) {
    double s = 0;
    for (size_t k = 0; k < cols; ++k) s += w[n * cols + k] * x[k];
    y[n] = s;
  }
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const double* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w[i];
  return out;
}

void rope(double* head, const ModelConfig& c, const Mat& factors, int pos) {
  const int half = c.rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.rope_dim);
    if (!factors.empty()) freq /= factors[i];
    const double angle = pos / static_cast<double>(c.rope_linear_scale) * freq;
    const int a = c.rope_neox ? i : 2 * i, b = c.rope_neox ? i + half : 2 * i + 1;
    const double x0 = head[a], x1 = head[b];
    head[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
    head[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
  }
}

}  // namespace

std::vector<std::vector<double>> reference_logits(const gguf::File& f, const std::vector<int32_t>& tokens) {
  const ModelConfig c = *ModelConfig::from_gguf(f);
  const Mat embd = load(f, "token_embd.weight");
  const Mat out_norm = load(f, "output_norm.weight");
  const Mat output = c.tied_embeddings ? embd : load(f, "output.weight");
  const Mat factors = load(f, "rope_freqs.weight");
  const size_t n = tokens.size(), dim = c.dim, hd = c.head_dim;
  std::vector<std::vector<double>> x(n, std::vector<double>(dim));
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < dim; ++i) x[t][i] = embd[tokens[t] * dim + i];
  }
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const Mat an = load(f, p + "attn_norm.weight"), wq = load(f, p + "attn_q.weight"),
              wk = load(f, p + "attn_k.weight"), wv = load(f, p + "attn_v.weight"),
              wo = load(f, p + "attn_output.weight"), bq = load(f, p + "attn_q.bias"),
              bk = load(f, p + "attn_k.bias"), bv = load(f, p + "attn_v.bias"),
              qn = load(f, p + "attn_q_norm.weight"), kn = load(f, p + "attn_k_norm.weight"),
              fn = load(f, p + "ffn_norm.weight"), wg = load(f, p + "ffn_gate.weight"),
              wu = load(f, p + "ffn_up.weight"), wd = load(f, p + "ffn_down.weight");
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto xn = rms_norm(x[t], an.data(), c.rms_eps);
      q[t] = matvec(wq, xn, c.q_dim());
      k[t] = matvec(wk, xn, c.kv_dim());
      v[t] = matvec(wv, xn, c.kv_dim());
      for (size_t i = 0; i < bq.size(); ++i) q[t][i] += bq[i];
      for (size_t i = 0; i < bk.size(); ++i) k[t][i] += bk[i];
      for (size_t i = 0; i < bv.size(); ++i) v[t][i] += bv[i];
      // Per head: the optional q/k norm (qwen3), then rope.
      auto heads = [&](std::vector<double>& vec, int num_heads, const Mat& norm) {
        for (int h = 0; h < num_heads; ++h) {
          double* head = &vec[h * hd];
          if (!norm.empty()) {
            auto normed = rms_norm(std::vector<double>(head, head + hd), norm.data(), c.rms_eps);
            std::copy(normed.begin(), normed.end(), head);
          }
          rope(head, c, factors, static_cast<int>(t));
        }
      };
      heads(q[t], c.num_heads, qn);
      heads(k[t], c.num_kv_heads, kn);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> att(c.q_dim(), 0.0);
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvh = h / (c.num_heads / c.num_kv_heads);
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (size_t e = 0; e < hd; ++e) d += q[t][h * hd + e] * k[j][kvh * hd + e];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j) {
          for (size_t e = 0; e < hd; ++e) att[h * hd + e] += s[j] / sum * v[j][kvh * hd + e];
        }
      }
      auto o = matvec(wo, att, dim);
      for (size_t i = 0; i < dim; ++i) x[t][i] += o[i];
      auto xn = rms_norm(x[t], fn.data(), c.rms_eps);
      auto g = matvec(wg, xn, c.ffn_dim), u = matvec(wu, xn, c.ffn_dim);
      for (int i = 0; i < c.ffn_dim; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      auto d = matvec(wd, g, dim);
      for (size_t i = 0; i < dim; ++i) x[t][i] += d[i];
    }
  }
  std::vector<std::vector<double>> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(output, rms_norm(x[t], out_norm.data(), c.rms_eps), c.vocab_size);
  return logits;
}

}  // namespace sluice::testing
