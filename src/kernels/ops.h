// Element-wise and per-row operations of the transformer block.
//
// Every reduction (the sum of squares in rms_norm, a dot product) runs in a fixed order that
// depends only on the row length, never on how many rows are processed together.
#pragma once

#include <cstdint>

namespace sluice::kernels {

// Dot product of length n with eight interleaved partial sums reduced in a fixed order.
float dot(const float* a, const float* b, int64_t n);

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; out may alias x.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// a[i] = silu(a[i]) * b[i], with a vector exp (activation.cc)
void silu_mul(float* a, const float* b, int64_t n);

// The sampler's passes over a row of logits (sampling.cc, vectorized):
// out[i] = x[i], NaN as -inf; returns the maximum of out (-inf for n == 0). `had_nan`, when
// given, says whether any x[i] was NaN.
float clean_max(const float* x, int64_t n, float* out, bool* had_nan = nullptr);
// out[i] = exp((x[i] - max) * scale), exactly 0 where (x[i] - max) * scale < -87 or is -inf.
// REQUIRES: max finite.
void exp_scaled(const float* x, int64_t n, float max, float scale, float* out);

// a[i] += b[i]
void add_inplace(float* a, const float* b, int64_t n);

// Rotary embedding of one head vector of `head_dim` values (the first `rot_dim` rotated).
// cos_sin holds rot_dim/2 (cos, sin) pairs for this token's position.
// Normal order rotates pairs (2i, 2i+1); neox order rotates (i, i + rot_dim/2).
void rope(float* head, int64_t rot_dim, const float* cos_sin, bool neox);

}  // namespace sluice::kernels
