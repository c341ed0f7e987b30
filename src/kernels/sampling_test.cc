#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/ops.h"

namespace sluice::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every length up to a few vectors, so the padded last vector is covered.
TEST(SamplingKernels, CleanMaxTurnsNanIntoMinusInfinityAndFindsTheMaximum) {
  for (int64_t n = 0; n < 40; ++n) {
    std::vector<float> x(n), out(n, 7.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = i % 5 == 3 ? std::nanf("") : static_cast<float>((i * 37) % 11) - 5.0f;
    float want = -kInf;
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isnan(x[i])) want = std::max(want, x[i]);
    }
    EXPECT_EQ(clean_max(x.data(), n, out.data()), want) << n;
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], std::isnan(x[i]) ? -kInf : x[i]) << n << " " << i;
  }
}

// Whether any value was NaN, wherever the one NaN is (a vector's lane, the scalar tail).
TEST(SamplingKernels, CleanMaxSaysWhetherItSawNan) {
  for (int64_t n = 0; n < 40; ++n) {
    std::vector<float> x(n, 1.0f), out(n);
    bool had_nan = true;
    clean_max(x.data(), n, out.data(), &had_nan);
    EXPECT_FALSE(had_nan) << n;
    for (int64_t at = 0; at < n; ++at) {
      x.assign(n, 1.0f);
      x[at] = std::nanf("");
      had_nan = false;
      EXPECT_EQ(clean_max(x.data(), n, out.data(), &had_nan), n > 1 ? 1.0f : -kInf);
      EXPECT_TRUE(had_nan) << n << " " << at;
    }
  }
}

TEST(SamplingKernels, ExpScaledMatchesExpAndIsZeroWhereItUnderflows) {
  for (int64_t n = 1; n < 40; ++n) {
    std::vector<float> x(n), out(n);
    for (int64_t i = 0; i < n; ++i) x[i] = 3.0f - 4.5f * static_cast<float>(i);  // down to -172
    x[n / 2] = -kInf;
    const float max = 3.0f, scale = 1.25f;
    exp_scaled(x.data(), n, max, scale, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const float a = (x[i] - max) * scale;
      if (x[i] == -kInf || a < -87.0f) {
        EXPECT_EQ(out[i], 0.0f) << i;
      } else {
        EXPECT_NEAR(out[i], std::exp(a), 4e-7f * std::exp(a)) << i;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::kernels
