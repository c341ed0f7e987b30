// Test support for the block-quantized types: random blocks of every type (random bytes, with
// the float16 fields set to small finite scales) and a naive dequantizer written element by
// element from ggml's dequantize_row_* loops, independent of quant_blocks.h's sub-block decoder.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"
#include "gguf/gguf_types.h"
#include "kernels/quant_blocks.h"

namespace sluice::kernels::testing {

// Byte offsets of the float16 fields of a block of type t (the scales the test sets).
inline std::vector<int> half_offsets(gguf::TensorType t) {
  using T = gguf::TensorType;
  switch (t) {
    case T::kQ4_0: case T::kQ5_0: case T::kQ8_0: case T::kIQ4_NL: case T::kIQ4_XS: return {0};
    case T::kQ4_1: case T::kQ5_1: case T::kQ4_K: case T::kQ5_K: return {0, 2};
    case T::kQ2_K: return {80, 82};
    case T::kQ3_K: return {108};
    case T::kQ6_K: return {208};
    default: return {};
  }
}

// `rows` rows of `cols` elements of random blocks of type t.
inline std::vector<uint8_t> random_blocks(gguf::TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t num_blocks = rows * cols / block_elements(t);
  const int bytes = block_bytes(t);
  std::vector<uint8_t> out(num_blocks * bytes);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  for (int64_t b = 0; b < num_blocks; ++b) {
    for (int off : half_offsets(t)) {
      const uint16_t h = f32_to_f16(scale(rng));
      std::memcpy(&out[b * bytes + off], &h, 2);
    }
  }
  return out;
}

// Row-major [rows, cols] values of the blocks, in double, element by element.
inline std::vector<double> naive_dequantize(gguf::TensorType t, const uint8_t* data, int64_t rows, int64_t cols) {
  using T = gguf::TensorType;
  auto half = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return double{f16_to_f32(h)};
  };
  const int64_t n = rows * cols;
  const int per = block_elements(t), bytes = block_bytes(t);
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = data + (i / per) * bytes;
    const int e = static_cast<int>(i % per);  // element within the block
    switch (t) {
      case T::kQ8_0: y[i] = half(p) * static_cast<int8_t>(p[2 + e]); break;
      case T::kQ4_0: case T::kIQ4_NL: {
        const int nib = e < 16 ? p[2 + e] & 15 : p[2 + e - 16] >> 4;
        y[i] = half(p) * (t == T::kQ4_0 ? nib - 8 : kIq4nlValues[nib]);
        break;
      }
      case T::kQ4_1: {
        const int nib = e < 16 ? p[4 + e] & 15 : p[4 + e - 16] >> 4;
        y[i] = half(p) * nib + half(p + 2);
        break;
      }
      case T::kQ5_0: case T::kQ5_1: {
        const int o = t == T::kQ5_1 ? 4 : 2;
        uint32_t qh;
        std::memcpy(&qh, p + o, 4);
        const int nib = e < 16 ? p[o + 4 + e] & 15 : p[o + 4 + e - 16] >> 4;
        const int v = nib | static_cast<int>(((qh >> e) & 1) << 4);
        y[i] = t == T::kQ5_1 ? half(p) * v + half(p + 2) : half(p) * (v - 16);
        break;
      }
      case T::kQ2_K: {
        // 2 halves of 128; in each, 4 shifts x 32 elements; a scale byte per 16.
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        const int sc = p[8 * h + 2 * j + l / 16];
        const int q = (p[16 + 32 * h + l] >> (2 * j)) & 3;
        y[i] = half(p + 80) * (sc & 15) * q - half(p + 82) * (sc >> 4);
        break;
      }
      case T::kQ3_K: {
        const int h = e / 128, j = (e % 128) / 32, l = e % 32;
        // Unpack the 16 6-bit scales as ggml does: 12 bytes read as 3 words, rearranged.
        uint32_t aux[4];
        std::memcpy(aux, p + 96, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
        aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
        aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
        aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
        int8_t scales[16];
        std::memcpy(scales, aux, 16);
        const int sc = scales[8 * h + 2 * j + l / 16] - 32;
        const int low = (p[32 + 32 * h + l] >> (2 * j)) & 3;
        const bool hbit = (p[l] >> (4 * h + j)) & 1;
        y[i] = half(p + 108) * sc * (low - (hbit ? 0 : 4));
        break;
      }
      case T::kQ4_K: case T::kQ5_K: {
        const bool q5 = t == T::kQ5_K;
        const int s = e / 32, l = e % 32;  // sub-block pair s / 2, nibble s % 2
        const uint8_t* sb = p + 4;
        int sc, m;
        if (s < 4) {
          sc = sb[s] & 63;
          m = sb[s + 4] & 63;
        } else {
          sc = (sb[s + 4] & 0xF) | ((sb[s - 4] >> 6) << 4);
          m = (sb[s + 4] >> 4) | ((sb[s - 0] >> 6) << 4);
        }
        const uint8_t q = p[(q5 ? 48 : 16) + 32 * (s / 2) + l];
        int v = s % 2 ? q >> 4 : q & 15;
        if (q5 && ((p[16 + l] >> s) & 1)) v += 16;
        y[i] = half(p) * sc * v - half(p + 2) * m;
        break;
      }
      case T::kQ6_K: {
        const int h = e / 128, l = (e % 128) % 32, quarter = (e % 128) / 32;
        const uint8_t* ql = p + 64 * h;
        const uint8_t* qh = p + 128 + 32 * h;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192 + 8 * h);
        const int lo = quarter == 0 ? ql[l] & 15 : quarter == 1 ? ql[l + 32] & 15 : quarter == 2 ? ql[l] >> 4 : ql[l + 32] >> 4;
        const int q = (lo | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
        y[i] = half(p + 208) * sc[l / 16 + 2 * quarter] * q;
        break;
      }
      case T::kIQ4_XS: {
        const int ib = e / 32, l = e % 32;
        uint16_t scales_h;
        std::memcpy(&scales_h, p + 2, 2);
        const int ls = ((p[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
        const uint8_t q = p[8 + 16 * ib + l % 16];
        y[i] = half(p) * (ls - 32) * kIq4nlValues[l < 16 ? q & 15 : q >> 4];
        break;
      }
      default: break;
    }
  }
  return y;
}

}  // namespace sluice::kernels::testing
