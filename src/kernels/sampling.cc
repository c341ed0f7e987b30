// The sampler's passes over a row of logits (engine/sampler.cc), vectorized: Highway compiles this
// file once per SIMD target (as activation.cc). Element-wise, or an exact maximum, so every value
// depends only on its inputs and the target's vector exp.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sampling.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include <cmath>

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;

float CleanMax(const float* x, int64_t n, float* out, bool* had_nan) {
  const DF d;
  const int64_t lanes = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -HUGE_VALF);
  auto vmax = neg_inf;
  auto nan = hn::FirstN(d, 0);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto is_nan = hn::IsNaN(v);
    nan = hn::Or(nan, is_nan);
    const auto c = hn::IfThenElse(is_nan, neg_inf, v);
    hn::StoreU(c, d, out + i);
    vmax = hn::Max(vmax, c);
  }
  float max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  bool any_nan = !hn::AllFalse(d, nan);
  for (; i < n; ++i) {
    any_nan = any_nan || std::isnan(x[i]);
    out[i] = std::isnan(x[i]) ? -HUGE_VALF : x[i];
    max = std::max(max, out[i]);
  }
  if (had_nan) *had_nan = any_nan;
  return max;
}

// exp((x - max) * scale), 0 below -87 (where float's exp is denormal or 0) and for -inf.
HWY_INLINE hn::Vec<DF> exp_scaled_vec(DF d, hn::Vec<DF> x, hn::Vec<DF> max, hn::Vec<DF> scale) {
  const auto a = hn::Mul(hn::Sub(x, max), scale);
  const auto low = hn::Set(d, -87.0f);
  return hn::IfThenZeroElse(hn::Lt(a, low), hn::Exp(d, hn::Max(a, low)));
}

void ExpScaled(const float* x, int64_t n, float max, float scale, float* out) {
  const DF d;
  const int64_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), vscale = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(exp_scaled_vec(d, hn::LoadU(d, x + i), vmax, vscale), d, out + i);
  if (i < n) {
    HWY_ALIGN float t[hn::MaxLanes(d)];
    for (int64_t j = 0; j < lanes; ++j) t[j] = i + j < n ? x[i + j] : -HUGE_VALF;
    hn::Store(exp_scaled_vec(d, hn::Load(d, t), vmax, vscale), d, t);
    for (int64_t j = i; j < n; ++j) out[j] = t[j - i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(CleanMax);
HWY_EXPORT(ExpScaled);

float clean_max(const float* x, int64_t n, float* out, bool* had_nan) {
  return HWY_DYNAMIC_DISPATCH(CleanMax)(x, n, out, had_nan);
}

void exp_scaled(const float* x, int64_t n, float max, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(ExpScaled)(x, n, max, scale, out);
}

}  // namespace sluice::kernels
#endif  // HWY_ONCE
