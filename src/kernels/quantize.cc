#include "kernels/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "kernels/quant_blocks.h"

namespace sluice::kernels {
namespace {

using gguf::TensorType;

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
float rounded_half(float v) { return f16_to_f32(f32_to_f16(v)); }

// ---- Round-to-nearest types, as ggml's reference quantizers ----

// The first value of largest magnitude, with its sign.
float signed_max(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::abs(x[j])) {
      amax = std::abs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Q4_0 / Q5_0: d = max / -2^(bits-1) maps the largest magnitude to the most negative level;
// levels are trunc(x / d + 2^(bits-1) + 0.5), capped at the top level.
void rtn_symmetric(const float* x, uint8_t* out, int bits) {
  const int half_range = 1 << (bits - 1), top = (1 << bits) - 1;
  const float bias = static_cast<float>(half_range) + 0.5f;  // 8.5 or 16.5, added to x / d
  const float d = signed_max(x, 32) / static_cast<float>(-half_range);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  uint8_t* qs = out + (bits == 5 ? 6 : 2);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(top, static_cast<int>(static_cast<int8_t>(x[j] * id + bias)));
    const int hi = std::min(top, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + bias)));
    qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  if (bits == 5) std::memcpy(out + 2, &qh, 4);
}

// Q4_1 / Q5_1: d = (max - min) / top, m = min; levels trunc((x - min) / d + 0.5).
void rtn_affine(const float* x, uint8_t* out, int bits) {
  const int top = (1 << bits) - 1;
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / static_cast<float>(top);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  put_half(out + 2, min);
  uint8_t* qs = out + (bits == 5 ? 8 : 4);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(top, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f)));
    const int hi = std::min(top, static_cast<int>(static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f)));
    qs[j] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  if (bits == 5) std::memcpy(out + 4, &qh, 4);
}

// Q8_0: d = max |x| / 127, q = round(x / d) (half away from zero).
void rtn_q8_0(const float* x, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  put_half(out, d);
  for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

// ---- Fitted types: least squares over candidate scales ----

int clamp_round(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi); }

// x[0..n) ~ scale * q + mn with q in [0, nmax] and mn <= 0 (the K-quants store the offset as
// -dmin * m, m >= 0). Candidates: the range mapped onto nmax + k / 10 levels; for each, the
// levels rounded, then scale and offset refitted by least squares. Returns the best by squared
// error.
void fit_affine(const float* x, int n, int nmax, float& scale, float& offset) {
  float lo = *std::min_element(x, x + n), hi = *std::max_element(x, x + n);
  lo = std::min(lo, 0.0f);
  scale = 0;
  offset = -lo;
  if (hi <= lo) return;
  double best = DBL_MAX;
  for (int k = -5; k <= 10; ++k) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (hi - lo);
    double sq = 0, sx = 0, sqq = 0, sqx = 0;
    int q[32];
    for (int j = 0; j < n; ++j) {
      q[j] = clamp_round(iscale * (x[j] - lo), 0, nmax);
      sq += q[j];
      sx += x[j];
      sqq += double{1.0} * q[j] * q[j];
      sqx += double{1.0} * q[j] * x[j];
    }
    if (sqq == 0) continue;
    const double det = n * sqq - sq * sq;  // 0 when every level is the same
    double s = 0, mn = 1;
    if (det > 0) {
      s = (n * sqx - sq * sx) / det;
      mn = (sx * sqq - sq * sqx) / det;
    }
    if (mn > 0) {  // the offset may only lower values
      mn = 0;
      s = sqx / sqq;
    }
    if (s <= 0) continue;
    double err = 0;
    for (int j = 0; j < n; ++j) {
      const double e = x[j] - (s * q[j] + mn);
      err += e * e;
    }
    if (err < best) {
      best = err;
      scale = static_cast<float>(s);
      offset = static_cast<float>(-mn);
    }
  }
}

// x[0..n) ~ scale * q with q in [-nmax, nmax - 1]: the largest magnitude mapped near -nmax
// (candidates nmax + k / 10), levels rounded, scale refitted by least squares; the best by
// squared error.
float fit_symmetric(const float* x, int n, int nmax) {
  const float max = signed_max(x, n);
  if (max == 0) return 0;
  double best = DBL_MAX;
  float scale = 0;
  for (int k = -9; k <= 9; ++k) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    double sqq = 0, sqx = 0;
    int q[32];
    for (int j = 0; j < n; ++j) {
      q[j] = clamp_round(iscale * x[j], -nmax, nmax - 1);
      sqq += double{1.0} * q[j] * q[j];
      sqx += double{1.0} * q[j] * x[j];
    }
    if (sqq == 0) continue;
    const double s = sqx / sqq;
    double err = 0;
    for (int j = 0; j < n; ++j) {
      const double e = x[j] - s * q[j];
      err += e * e;
    }
    if (err < best) {
      best = err;
      scale = static_cast<float>(s);
    }
  }
  return scale;
}

// The IQ4 level nearest to v (ties to the lower): the levels ascend, so the answer is the
// number of midpoints between neighbours that v exceeds.
int nearest_iq4(float v) {
  static constexpr float kMid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                     7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};
  return static_cast<int>(std::upper_bound(kMid, kMid + 15, v, [](float a, float b) { return a <= b; }) - kMid);
}

// x[0..32) ~ scale * kIq4nlValues[q]: the largest magnitude mapped near -127 (the widest level)
// or near 113 (the other end), levels chosen nearest, scale refitted by least squares.
float fit_iq4(const float* x) {
  const float max = signed_max(x, 32);
  if (max == 0) return 0;
  double best = DBL_MAX;
  float scale = 0;
  for (const float top : {-127.0f, 113.0f}) {
    for (int k = -9; k <= 9; ++k) {
      const float d = max / (top * (1.0f + 0.01f * static_cast<float>(k)));
      double sll = 0, slx = 0;
      int q[32];
      for (int j = 0; j < 32; ++j) {
        q[j] = nearest_iq4(x[j] / d);
        sll += double{1.0} * kIq4nlValues[q[j]] * kIq4nlValues[q[j]];
        slx += double{1.0} * kIq4nlValues[q[j]] * x[j];
      }
      const double s = slx / sll;
      double err = 0;
      for (int j = 0; j < 32; ++j) {
        const double e = x[j] - s * kIq4nlValues[nearest_iq4(static_cast<float>(x[j] / s))];
        err += e * e;
      }
      if (err < best) {
        best = err;
        scale = static_cast<float>(s);
      }
    }
  }
  return scale;
}

void put_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

void iq4_nl(const float* x, uint8_t* out) {
  const float d = rounded_half(fit_iq4(x));
  put_half(out, d);
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = d != 0 ? nearest_iq4(x[j] / d) : nearest_iq4(0);
  put_nibbles(q, out + 2);
}

// The 6-bit scale and min of sub-block j of Q4_K / Q5_K into their 12 packed bytes (the inverse
// of quant_blocks.h's scale_min_k4).
void pack_scale_min_k4(const int* sc, const int* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// Q4_K (bits 4) and Q5_K (bits 5): a scale and offset per 32, quantized to 6 bits against the
// super-block's d and dmin.
void k_affine_32(const float* x, uint8_t* out, int bits) {
  const int nmax = (1 << bits) - 1;
  float scale[8], offset[8];
  for (int s = 0; s < 8; ++s) fit_affine(x + 32 * s, 32, nmax, scale[s], offset[s]);
  const float max_scale = *std::max_element(scale, scale + 8), max_offset = *std::max_element(offset, offset + 8);
  const float d = rounded_half(max_scale / 63.0f), dmin = rounded_half(max_offset / 63.0f);
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? clamp_round(scale[s] / d, 0, 63) : 0;
    m[s] = dmin > 0 ? clamp_round(offset[s] / dmin, 0, 63) : 0;
  }
  put_half(out, d);
  put_half(out + 2, dmin);
  pack_scale_min_k4(sc, m, out + 4);
  uint8_t* qh = out + 16;
  uint8_t* qs = out + (bits == 5 ? 48 : 16);
  if (bits == 5) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    const float ds = d * static_cast<float>(sc[s]), ms = dmin * static_cast<float>(m[s]);
    for (int k = 0; k < 32; ++k) {
      const int q = ds > 0 ? clamp_round((x[32 * s + k] + ms) / ds, 0, nmax) : 0;
      qs[32 * (s / 2) + k] |= static_cast<uint8_t>((q & 15) << (4 * (s % 2)));
      if (bits == 5) qh[k] |= static_cast<uint8_t>(((q >> 4) & 1) << s);
    }
  }
}

// Q2_K: a scale and offset per 16, 4 bits each against d and dmin; levels 0..3.
void q2_k(const float* x, uint8_t* out) {
  float scale[16], offset[16];
  for (int g = 0; g < 16; ++g) fit_affine(x + 16 * g, 16, 3, scale[g], offset[g]);
  const float max_scale = *std::max_element(scale, scale + 16), max_offset = *std::max_element(offset, offset + 16);
  const float d = rounded_half(max_scale / 15.0f), dmin = rounded_half(max_offset / 15.0f);
  uint8_t* qs = out + 16;
  std::memset(qs, 0, 64);
  for (int g = 0; g < 16; ++g) {
    const int sc = d > 0 ? clamp_round(scale[g] / d, 0, 15) : 0;
    const int m = dmin > 0 ? clamp_round(offset[g] / dmin, 0, 15) : 0;
    out[g] = static_cast<uint8_t>(sc | (m << 4));
    const float ds = d * static_cast<float>(sc), ms = dmin * static_cast<float>(m);
    // Group g is half g % 2 of sub-block s = g / 2: bits 2 (s % 4) of qs[32 (s / 4) + k].
    const int s = g / 2;
    for (int l = 0; l < 16; ++l) {
      const int k = 16 * (g % 2) + l;
      const int q = ds > 0 ? clamp_round((x[16 * g + l] + ms) / ds, 0, 3) : 0;
      qs[32 * (s / 4) + k] |= static_cast<uint8_t>(q << (2 * (s % 4)));
    }
  }
  put_half(out + 80, d);
  put_half(out + 82, dmin);
}

// Super-block scale for signed per-group scales stored in [lo, hi]: the largest magnitude maps
// to lo. Returns d; sc[g] = clamp(round(scale[g] / d)).
float quantize_scales(const float* scale, int n, int lo, int hi, int* sc) {
  const float max = signed_max(scale, n);
  const float d = rounded_half(max / static_cast<float>(lo));
  for (int g = 0; g < n; ++g) sc[g] = d != 0 ? clamp_round(scale[g] / d, lo, hi) : 0;
  return d;
}

// Q3_K: a scale per 16 (6 bits, stored biased by 32); levels -4..3 as 2 low bits + a high bit.
void q3_k(const float* x, uint8_t* out) {
  float scale[16];
  for (int g = 0; g < 16; ++g) scale[g] = fit_symmetric(x + 16 * g, 16, 4);
  int sc[16];
  const float d = quantize_scales(scale, 16, -32, 31, sc);
  uint8_t* hmask = out;
  uint8_t* qs = out + 32;
  uint8_t* scales = out + 96;
  std::memset(out, 0, 108);
  for (int g = 0; g < 16; ++g) {
    const int u = sc[g] + 32;  // 6 bits: the low 4 in a nibble of bytes 0..7, the high 2 in bytes 8..11
    scales[g % 8] |= static_cast<uint8_t>((u & 15) << (g < 8 ? 0 : 4));
    scales[8 + g % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (g / 4)));
    const float ds = d * static_cast<float>(sc[g]);
    const int s = g / 2;
    for (int l = 0; l < 16; ++l) {
      const int k = 16 * (g % 2) + l;
      const int q = (ds != 0 ? clamp_round(x[16 * g + l] / ds, -4, 3) : 0) + 4;
      qs[32 * (s / 4) + k] |= static_cast<uint8_t>((q & 3) << (2 * (s % 4)));
      hmask[k] |= static_cast<uint8_t>((q >> 2) << s);
    }
  }
  put_half(out + 108, d);
}

// Q6_K: an int8 scale per 16; levels -32..31 as 4 low bits + 2 high bits.
void q6_k(const float* x, uint8_t* out) {
  float scale[16];
  for (int g = 0; g < 16; ++g) scale[g] = fit_symmetric(x + 16 * g, 16, 32);
  int sc[16];
  const float d = quantize_scales(scale, 16, -128, 127, sc);
  uint8_t* ql = out;
  uint8_t* qh = out + 128;
  std::memset(out, 0, 192);
  for (int g = 0; g < 16; ++g) {
    out[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(sc[g]));
    const float ds = d * static_cast<float>(sc[g]);
    // Group g: sub-block s = g / 2 is quarter c = s % 4 of half h = s / 4.
    const int s = g / 2, h = s / 4, c = s % 4;
    for (int l = 0; l < 16; ++l) {
      const int k = 16 * (g % 2) + l;
      const int q = (ds != 0 ? clamp_round(x[16 * g + l] / ds, -32, 31) : 0) + 32;
      ql[64 * h + 32 * (c % 2) + k] |= static_cast<uint8_t>((q & 15) << (c < 2 ? 0 : 4));
      qh[32 * h + k] |= static_cast<uint8_t>((q >> 4) << (2 * c));
    }
  }
  put_half(out + 208, d);
}

// IQ4_XS: an IQ4 scale per 32, 6 bits (biased by 32) against the super-block's d.
void iq4_xs(const float* x, uint8_t* out) {
  float scale[8];
  for (int s = 0; s < 8; ++s) scale[s] = fit_iq4(x + 32 * s);
  int sc[8];
  const float d = quantize_scales(scale, 8, -32, 31, sc);
  put_half(out, d);
  uint16_t scales_h = 0;
  std::memset(out + 4, 0, 4);
  for (int s = 0; s < 8; ++s) {
    const int u = sc[s] + 32;
    out[4 + s / 2] |= static_cast<uint8_t>((u & 15) << (4 * (s % 2)));
    scales_h |= static_cast<uint16_t>((u >> 4) << (2 * s));
    const float ds = d * static_cast<float>(sc[s]);
    int q[32];
    for (int k = 0; k < 32; ++k) q[k] = nearest_iq4(ds != 0 ? x[32 * s + k] / ds : 0.0f);
    put_nibbles(q, out + 8 + 16 * s);
  }
  std::memcpy(out + 2, &scales_h, 2);
}

}  // namespace

bool quantize_supported(TensorType type) {
  return type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16 || is_block_quant(type);
}

uint64_t quantized_bytes(TensorType type, int64_t n) {
  switch (type) {
    case TensorType::kF32: return static_cast<uint64_t>(n) * 4;
    case TensorType::kF16: case TensorType::kBF16: return static_cast<uint64_t>(n) * 2;
    default: return static_cast<uint64_t>(n / block_elements(type)) * static_cast<uint64_t>(block_bytes(type));
  }
}

void quantize_row(TensorType type, const float* x, int64_t n, uint8_t* out) {
  switch (type) {
    case TensorType::kF32: std::memcpy(out, x, n * sizeof(float)); return;
    case TensorType::kF16: case TensorType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = type == TensorType::kF16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  const int per = block_elements(type), bytes = block_bytes(type);
  for (int64_t b = 0; b < n / per; ++b) {
    const float* xb = x + b * per;
    uint8_t* ob = out + b * bytes;
    switch (type) {
      case TensorType::kQ8_0: rtn_q8_0(xb, ob); break;
      case TensorType::kQ4_0: rtn_symmetric(xb, ob, 4); break;
      case TensorType::kQ5_0: rtn_symmetric(xb, ob, 5); break;
      case TensorType::kQ4_1: rtn_affine(xb, ob, 4); break;
      case TensorType::kQ5_1: rtn_affine(xb, ob, 5); break;
      case TensorType::kIQ4_NL: iq4_nl(xb, ob); break;
      case TensorType::kQ2_K: q2_k(xb, ob); break;
      case TensorType::kQ3_K: q3_k(xb, ob); break;
      case TensorType::kQ4_K: k_affine_32(xb, ob, 4); break;
      case TensorType::kQ5_K: k_affine_32(xb, ob, 5); break;
      case TensorType::kQ6_K: q6_k(xb, ob); break;
      case TensorType::kIQ4_XS: iq4_xs(xb, ob); break;
      default: break;
    }
  }
}

}  // namespace sluice::kernels
