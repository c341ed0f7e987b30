#include "kernels/attention.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::kernels {
namespace {

// One sequence of `len` positions stored in blocks of 4 slots, placed in physical blocks given by
// `table`. Reference: contiguous attention in double.
struct Fixture {
  AttentionShape shape{4, 2, 8, 1.0f / std::sqrt(8.0f)};
  int32_t block_size = 4;
  int64_t len = 13;
  KvType type = KvType::kF32;
  std::vector<float> q, k_seq, v_seq;  // logical [len, ...]

  Fixture() {
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    q.resize(len * 32);
    k_seq.resize(len * 16);
    v_seq.resize(len * 16);
    for (auto* vec : {&q, &k_seq, &v_seq}) for (auto& x : *vec) x = d(rng);
  }

  std::vector<float> run(const std::vector<int32_t>& table, const std::vector<int32_t>& tokens, int threads) {
    const int64_t num_slots = 8 * block_size;
    const size_t esize = kv_type_size(type);
    // Unwritten slots hold NaN (0xFF bytes are a NaN in f32 and in f16).
    std::vector<uint8_t> k(num_slots * 16 * esize, 0xFF), v(num_slots * 16 * esize, 0xFF);
    for (int64_t p = 0; p < len; ++p) {
      int64_t slot = int64_t{table[p / block_size]} * block_size + p % block_size;
      store_kv(type, &k_seq[p * 16], 16, &k[slot * 16 * esize]);
      store_kv(type, &v_seq[p * 16], 16, &v[slot * 16 * esize]);
    }
    std::vector<float> qb;
    std::vector<int32_t> pos, seq;
    for (int32_t t : tokens) {
      qb.insert(qb.end(), q.begin() + t * 32, q.begin() + (t + 1) * 32);
      pos.push_back(t);
      seq.push_back(0);
    }
    std::vector<float> out(tokens.size() * 32);
    AttentionBatch batch{qb.data(), pos.data(), seq.data(), table.data(),
                         static_cast<int32_t>(table.size()), static_cast<int64_t>(tokens.size())};
    ThreadPool pool(threads);
    paged_attention(pool, shape, batch, {k.data(), v.data(), block_size, type}, out.data());
    return out;
  }
};

class PagedAttention : public testing::TestWithParam<KvType> {};

TEST_P(PagedAttention, MatchesContiguousReference) {
  Fixture f;
  f.type = GetParam();
  // f16 keys/values carry a relative rounding error of 2^-11.
  const double tol = f.type == KvType::kF16 ? 4e-3 : 1e-5;
  std::vector<int32_t> all(f.len);
  for (int i = 0; i < f.len; ++i) all[i] = i;
  auto out = f.run({5, 2, 7, 0}, all, 2);
  for (int64_t t = 0; t < f.len; ++t) {
    for (int h = 0; h < 4; ++h) {
      const int kvh = h / 2;
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double acc = 0;
        for (int d = 0; d < 8; ++d) acc += double{f.q[t * 32 + h * 8 + d]} * f.k_seq[j * 16 + kvh * 8 + d];
        s[j] = acc / std::sqrt(8.0);
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int d = 0; d < 8; ++d) {
        double ref = 0;
        for (int64_t j = 0; j <= t; ++j) ref += s[j] / sum * f.v_seq[j * 16 + kvh * 8 + d];
        EXPECT_NEAR(out[t * 32 + h * 8 + d], ref, tol) << t << " " << h << " " << d;
      }
    }
  }
}

TEST_P(PagedAttention, OutputIgnoresBlockPlacementBatchAndThreads) {
  Fixture f;
  f.type = GetParam();
  auto last_alone = f.run({0, 1, 2, 3}, {12}, 1);
  auto moved = f.run({6, 3, 1, 4}, {12}, 1);
  auto in_batch = f.run({6, 3, 1, 4}, {9, 10, 11, 12}, 3);
  EXPECT_EQ(0, std::memcmp(last_alone.data(), moved.data(), 32 * 4));
  EXPECT_EQ(0, std::memcmp(last_alone.data(), in_batch.data() + 3 * 32, 32 * 4));
}

INSTANTIATE_TEST_SUITE_P(KvTypes, PagedAttention, testing::Values(KvType::kF32, KvType::kF16),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

TEST(StoreKv, F16RoundsToNearestEven) {
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10 (rounds to the even 1); 1 + 3 * 2^-11 rounds up.
  const float values[4] = {1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f};
  const uint16_t expected[4] = {0x3C00, 0x3C00, 0x3C02, 0x7BFF};
  float src[19];  // vector body and scalar tail
  for (int i = 0; i < 19; ++i) src[i] = values[i % 4];
  uint16_t dst[19];
  store_kv(KvType::kF16, src, 19, dst);
  for (int i = 0; i < 19; ++i) EXPECT_EQ(dst[i], expected[i % 4]) << i;
}

}  // namespace
}  // namespace sluice::kernels
