// silu_mul, vectorized: Highway compiles this file once per SIMD target (as matmul.cc).
//
// a[i] = a[i] / (1 + exp(-a[i])) * b[i] with Highway's vector exp over 8-lane vectors (a short
// last vector padded): element-wise, so a value depends only on its inputs and the target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;

HWY_INLINE hn::Vec<DF> silu_mul_vec(DF d, hn::Vec<DF> a, hn::Vec<DF> b) {
  // The vector exp is valid up to about 88.7 (exp(88) is near the largest float), so -a is
  // clamped there; below a = -88, silu(a) = a * exp(a) is under 1e-36 and taken as 0.
  const auto e = hn::Exp(d, hn::Min(hn::Neg(a), hn::Set(d, 88.0f)));
  const auto silu = hn::IfThenZeroElse(hn::Lt(a, hn::Set(d, -88.0f)), hn::Div(a, hn::Add(hn::Set(d, 1.0f), e)));
  return hn::Mul(silu, b);
}

void SiluMul(float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t lanes = hn::Lanes(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(silu_mul_vec(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, a + i);
  if (i < n) {
    HWY_ALIGN float ta[hn::MaxLanes(d)] = {}, tb[hn::MaxLanes(d)] = {};
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
    hn::Store(silu_mul_vec(d, hn::Load(d, ta), hn::Load(d, tb)), d, ta);
    for (int64_t j = i; j < n; ++j) a[j] = ta[j - i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace sluice::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::kernels {

HWY_EXPORT(SiluMul);

void silu_mul(float* a, const float* b, int64_t n) { HWY_DYNAMIC_DISPATCH(SiluMul)(a, b, n); }

}  // namespace sluice::kernels
#endif  // HWY_ONCE
