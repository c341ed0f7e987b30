// The quantized ggml block layouts sluice computes, and one decoder that reads any of them as
// 32-element sub-blocks of small integers with integer and float scales.
//
// Layouts follow ggml's block definitions (ggml/src/ggml-common.h: block_q4_0 ... block_iq4_xs)
// and the value each byte stands for follows its reference dequantizers
// (ggml/src/ggml-quants.c: dequantize_row_*), as also described by the GGUF specification's
// list of tensor types (ggml docs/gguf.md). All multi-byte fields are little-endian; "half" is
// an IEEE binary16.
//
//   type    block  bytes  fields, in order                         element value
//   Q4_0     32     18    d, qs[16]                                d * (nibble - 8)
//   Q4_1     32     20    d, m, qs[16]                             d * nibble + m
//   Q5_0     32     22    d, qh[4], qs[16]                         d * (nibble | high bit << 4 - 16)
//   Q5_1     32     24    d, m, qh[4], qs[16]                      d * (nibble | high bit << 4) + m
//   Q8_0     32     34    d, qs[32] (int8)                         d * q
//   IQ4_NL   32     18    d, qs[16]                                d * kIq4nlValues[nibble]
//   Q2_K    256     84    scales[16], qs[64], d, dmin              d * sc * q2 - dmin * m  (per 16)
//   Q3_K    256    110    hmask[32], qs[64], scales[12], d         d * (sc - 32) * (q2 - 4 * !hbit)
//   Q4_K    256    144    d, dmin, scales[12], qs[128]             d * sc * q4 - dmin * m  (per 32)
//   Q5_K    256    176    d, dmin, scales[12], qh[32], qs[128]     d * sc * q5 - dmin * m  (per 32)
//   Q6_K    256    210    ql[128], qh[64], scales[16] (int8), d    d * sc * (q6 - 32)      (per 16)
//   IQ4_XS  256    136    d, scales_h, scales_l[4], qs[128]        d * (sc - 32) * kIq4nlValues[nibble]
//
// In the 32-element types, element j < 16 is the low nibble of qs[j] and element j + 16 its high
// nibble (the fifth bit, for Q5, is bit j resp. j + 16 of qh). The super-block types are read per
// 32-element sub-block b = 0..7 below (decode_block32 spells out which bytes each takes).
//
// The decoded form is what the integer kernels multiply: for sub-block b of a row,
//
//   w[k] = d * sc[k / 16] * q[k]  +  dmin * m[k / 16]          (k = 0..31)
//
// with q in int8 and sc, m small integers, so a dot product with activations quantized as
// x[k] ~= dx * qx[k] is, exactly in integers,
//
//   isum = sc[0] * sum_{k<16} q[k] qx[k] + sc[1] * sum_{k>=16} q[k] qx[k]
//   msum = m[0] * sum_{k<16} qx[k]      + m[1] * sum_{k>=16} qx[k]
//
// and then the float work  acc = fma(d * dx, isum, acc);  acc = fma(dmin * dx, msum, acc)  (the
// second only for types with a min). A sub-block's |isum| stays below 2^24 (the largest, Q6_K
// and IQ4_XS, reach about 1.66e7), and a super-block's sum of eight below 2^28, so the integers
// are exact in int32 in any summation order (matmul_quant.cc adds a super-block's before its
// float steps).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/half.h"
#include "gguf/gguf_types.h"

namespace sluice::kernels {

inline constexpr int kSubBlock = 32;   // elements of a decoded sub-block
inline constexpr int kSuperBlock = 256;  // elements of a K-quant / IQ4_XS super-block

// The 16 levels of IQ4_NL and IQ4_XS (ggml-common.h, kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// One 32-element sub-block in the decoded form above.
struct Decoded32 {
  int8_t q[kSubBlock];
  int32_t sc[2];  // integer scale of elements 0..15 and 16..31
  int32_t m[2];   // integer min of elements 0..15 and 16..31 (0 for types without a min)
  float d;        // float scale
  float dmin;     // float min scale (0 for types without a min); already carries the sign
};

// The quantized types the integer kernels decode (Q8_0 has its own kernel as well).
constexpr bool is_block_quant(gguf::TensorType t) {
  switch (t) {
    case gguf::TensorType::kQ4_0: case gguf::TensorType::kQ4_1: case gguf::TensorType::kQ5_0:
    case gguf::TensorType::kQ5_1: case gguf::TensorType::kQ8_0: case gguf::TensorType::kIQ4_NL:
    case gguf::TensorType::kQ2_K: case gguf::TensorType::kQ3_K: case gguf::TensorType::kQ4_K:
    case gguf::TensorType::kQ5_K: case gguf::TensorType::kQ6_K: case gguf::TensorType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

// Whether the type's values carry a min term (dmin * m).
constexpr bool has_min(gguf::TensorType t) {
  return t == gguf::TensorType::kQ4_1 || t == gguf::TensorType::kQ5_1 || t == gguf::TensorType::kQ2_K ||
         t == gguf::TensorType::kQ4_K || t == gguf::TensorType::kQ5_K;
}

// Whether the per-16 scales of a sub-block can differ (else sc[0] == sc[1] and m[0] == m[1]).
constexpr bool has_half_scales(gguf::TensorType t) {
  return t == gguf::TensorType::kQ2_K || t == gguf::TensorType::kQ3_K || t == gguf::TensorType::kQ6_K;
}

// Bytes of one block of the type and the elements it holds.
constexpr int block_bytes(gguf::TensorType t) {
  switch (t) {
    case gguf::TensorType::kQ4_0: case gguf::TensorType::kIQ4_NL: return 18;
    case gguf::TensorType::kQ4_1: return 20;
    case gguf::TensorType::kQ5_0: return 22;
    case gguf::TensorType::kQ5_1: return 24;
    case gguf::TensorType::kQ8_0: return 34;
    case gguf::TensorType::kQ2_K: return 84;
    case gguf::TensorType::kQ3_K: return 110;
    case gguf::TensorType::kQ4_K: return 144;
    case gguf::TensorType::kQ5_K: return 176;
    case gguf::TensorType::kQ6_K: return 210;
    case gguf::TensorType::kIQ4_XS: return 136;
    default: return 0;
  }
}
constexpr int block_elements(gguf::TensorType t) {
  switch (t) {
    case gguf::TensorType::kQ2_K: case gguf::TensorType::kQ3_K: case gguf::TensorType::kQ4_K:
    case gguf::TensorType::kQ5_K: case gguf::TensorType::kQ6_K: case gguf::TensorType::kIQ4_XS:
      return kSuperBlock;
    default:
      return kSubBlock;
  }
}

namespace quant_detail {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Nibbles of 16 bytes: element j < 16 is qs[j] & 15, element j + 16 is qs[j] >> 4.
inline void nibbles(const uint8_t* qs, uint8_t* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = qs[j] & 15;
    out[j + 16] = qs[j] >> 4;
  }
}

// The 6-bit scale and min of sub-block j of Q4_K / Q5_K from their 12 packed bytes: sub-blocks
// 0..3 take the low 6 bits of bytes j (scale) and j + 4 (min); 4..7 take a nibble of byte j + 4
// and the top 2 bits of bytes j - 4 (scale) and j (min).
inline void scale_min_k4(int j, const uint8_t* s, int32_t& sc, int32_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 6-bit scale (0..63, stored biased by 32) of 16-element group g of Q3_K: the low 4 bits are
// a nibble of bytes 0..7 (low nibbles for g < 8), the high 2 bits a 2-bit field of bytes 8..11.
inline int32_t scale_q3k(int g, const uint8_t* s) {
  const int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4;
  const int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace quant_detail

// Decodes sub-block b (elements 32b .. 32b + 31) of a row of type t. REQUIRES: is_block_quant(t)
// and b within the row.
inline void decode_block32(gguf::TensorType t, const uint8_t* row, int64_t b, Decoded32& out) {
  using namespace quant_detail;
  out.sc[0] = out.sc[1] = 1;
  out.m[0] = out.m[1] = 0;
  out.dmin = 0.0f;
  uint8_t u[kSubBlock];
  switch (t) {
    case gguf::TensorType::kQ4_0: {
      const uint8_t* p = row + b * 18;
      out.d = half_at(p);
      nibbles(p + 2, u);
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = static_cast<int8_t>(u[k] - 8);
      return;
    }
    case gguf::TensorType::kQ4_1: {
      const uint8_t* p = row + b * 20;
      out.d = half_at(p);
      out.dmin = half_at(p + 2);
      out.m[0] = out.m[1] = 1;
      nibbles(p + 4, u);
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = static_cast<int8_t>(u[k]);
      return;
    }
    case gguf::TensorType::kQ5_0:
    case gguf::TensorType::kQ5_1: {
      const bool q51 = t == gguf::TensorType::kQ5_1;
      const uint8_t* p = row + b * (q51 ? 24 : 22);
      out.d = half_at(p);
      if (q51) {
        out.dmin = half_at(p + 2);
        out.m[0] = out.m[1] = 1;
      }
      const uint8_t* qh_p = p + (q51 ? 4 : 2);
      uint32_t qh;
      std::memcpy(&qh, qh_p, 4);
      nibbles(qh_p + 4, u);
      const int bias = q51 ? 0 : 16;
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = static_cast<int8_t>((u[k] | (((qh >> k) & 1) << 4)) - bias);
      return;
    }
    case gguf::TensorType::kQ8_0: {
      const uint8_t* p = row + b * 34;
      out.d = half_at(p);
      std::memcpy(out.q, p + 2, kSubBlock);
      return;
    }
    case gguf::TensorType::kIQ4_NL: {
      const uint8_t* p = row + b * 18;
      out.d = half_at(p);
      nibbles(p + 2, u);
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = kIq4nlValues[u[k]];
      return;
    }
    default: break;
  }
  // Super-block types: sub-block s of super-block p.
  const int s = static_cast<int>(b % 8);
  switch (t) {
    case gguf::TensorType::kQ2_K: {
      // Sub-block s reads bits 2 (s % 4) of qs[32 (s / 4) + k]; its 16-element groups use
      // scales[2s] and scales[2s + 1]: scale in the low nibble, min in the high one.
      const uint8_t* p = row + (b / 8) * 84;
      const uint8_t* scales = p;
      const uint8_t* qs = p + 16 + 32 * (s / 4);
      out.d = half_at(p + 80);
      out.dmin = -half_at(p + 82);
      const int shift = 2 * (s % 4);
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = static_cast<int8_t>((qs[k] >> shift) & 3);
      for (int h = 0; h < 2; ++h) {
        out.sc[h] = scales[2 * s + h] & 15;
        out.m[h] = scales[2 * s + h] >> 4;
      }
      return;
    }
    case gguf::TensorType::kQ3_K: {
      // Low 2 bits as in Q2_K; the third bit is bit s of hmask[k], and a clear bit subtracts 4.
      const uint8_t* p = row + (b / 8) * 110;
      const uint8_t* hmask = p;
      const uint8_t* qs = p + 32 + 32 * (s / 4);
      const uint8_t* scales = p + 96;
      out.d = half_at(p + 108);
      const int shift = 2 * (s % 4);
      for (int k = 0; k < kSubBlock; ++k) {
        const int low = (qs[k] >> shift) & 3;
        out.q[k] = static_cast<int8_t>(low - (((hmask[k] >> s) & 1) ? 0 : 4));
      }
      for (int h = 0; h < 2; ++h) out.sc[h] = scale_q3k(2 * s + h, scales) - 32;
      return;
    }
    case gguf::TensorType::kQ4_K:
    case gguf::TensorType::kQ5_K: {
      // Sub-blocks 2i and 2i + 1 are the low and high nibbles of qs[32i .. 32i + 31]; Q5_K's
      // fifth bit is bit s of qh[k].
      const bool q5 = t == gguf::TensorType::kQ5_K;
      const uint8_t* p = row + (b / 8) * (q5 ? 176 : 144);
      out.d = half_at(p);
      out.dmin = -half_at(p + 2);
      int32_t sc, m;
      scale_min_k4(s, p + 4, sc, m);
      out.sc[0] = out.sc[1] = sc;
      out.m[0] = out.m[1] = m;
      const uint8_t* qh = p + 16;
      const uint8_t* qs = p + (q5 ? 48 : 16) + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int k = 0; k < kSubBlock; ++k) {
        int v = (qs[k] >> shift) & 15;
        if (q5) v |= ((qh[k] >> s) & 1) << 4;
        out.q[k] = static_cast<int8_t>(v);
      }
      return;
    }
    case gguf::TensorType::kQ6_K: {
      // Each half of the super-block (128 elements, h = s / 4) has 64 bytes of ql, 32 of qh and 8
      // scales. Quarter c = s % 4 of it: low 4 bits from ql[64h + 32 (c % 2) + k] (low nibble for
      // c < 2), high 2 bits from bits 2c of qh[32h + k]; its scales are scales[8h + 2c + 0/1].
      const uint8_t* p = row + (b / 8) * 210;
      const int h = s / 4, c = s % 4;
      const uint8_t* ql = p + 64 * h + 32 * (c % 2);
      const uint8_t* qh = p + 128 + 32 * h;
      const auto* scales = reinterpret_cast<const int8_t*>(p + 192);
      out.d = half_at(p + 208);
      const int lshift = c < 2 ? 0 : 4;
      for (int k = 0; k < kSubBlock; ++k) {
        const int v = ((ql[k] >> lshift) & 15) | (((qh[k] >> (2 * c)) & 3) << 4);
        out.q[k] = static_cast<int8_t>(v - 32);
      }
      for (int g = 0; g < 2; ++g) out.sc[g] = scales[8 * h + 2 * c + g];
      return;
    }
    case gguf::TensorType::kIQ4_XS: {
      // 6-bit scale of sub-block s: a nibble of scales_l[s / 2] (low for even s) and bits 2s of
      // scales_h; levels as IQ4_NL from qs[16s .. 16s + 15].
      const uint8_t* p = row + (b / 8) * 136;
      out.d = half_at(p);
      uint16_t scales_h;
      std::memcpy(&scales_h, p + 2, 2);
      const int low = (p[4 + s / 2] >> (4 * (s % 2))) & 15;
      const int high = (scales_h >> (2 * s)) & 3;
      out.sc[0] = out.sc[1] = (low | (high << 4)) - 32;
      nibbles(p + 8 + 16 * s, u);
      for (int k = 0; k < kSubBlock; ++k) out.q[k] = kIq4nlValues[u[k]];
      return;
    }
    default: return;
  }
}

// Element values of sub-block b as floats: (d * sc) * q + dmin * m.
inline void dequantize_block32(gguf::TensorType t, const uint8_t* row, int64_t b, float* out) {
  Decoded32 dec;
  decode_block32(t, row, b, dec);
  for (int k = 0; k < kSubBlock; ++k) {
    const int h = k / 16;
    out[k] = dec.d * static_cast<float>(dec.sc[h]) * dec.q[k] + dec.dmin * static_cast<float>(dec.m[h]);
  }
}

}  // namespace sluice::kernels
