#include "kernels/attention.h"
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::kernels {
namespace {

// Head layout of a test: heads, kv heads, head_dim and sequence length. The shapes cover a
// key count that is not a multiple of the key tile (8), GQA groups of 1, 2 and 9 heads (more
// than the head tile of 8) and head dims with a scalar tail.
struct Dims {
  int32_t heads, kv_heads, head_dim;
  int64_t len;
};

// One sequence of `len` positions stored in blocks of 4 slots, placed in physical blocks given by
// `table`. Reference: contiguous attention in double.
struct Fixture {
  Dims dims;
  AttentionShape shape;
  int32_t block_size = 4;
  KvType type = KvType::kF32;
  int64_t q_dim, kv_dim;
  std::vector<float> q, k_seq, v_seq;  // logical [len, ...]

  Fixture(Dims d, KvType t)
      : dims(d),
        shape{d.heads, d.kv_heads, d.head_dim, 1.0f / std::sqrt(static_cast<float>(d.head_dim))},
        type(t),
        q_dim(int64_t{d.heads} * d.head_dim),
        kv_dim(int64_t{d.kv_heads} * d.head_dim) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    q.resize(d.len * q_dim);
    k_seq.resize(d.len * kv_dim);
    v_seq.resize(d.len * kv_dim);
    for (auto* vec : {&q, &k_seq, &v_seq}) for (auto& x : *vec) x = nd(rng);
  }

  int32_t num_blocks() const { return static_cast<int32_t>((dims.len + block_size - 1) / block_size); }

  std::vector<float> run(const std::vector<int32_t>& table, const std::vector<int32_t>& tokens, int threads) {
    const int64_t num_slots = 2 * num_blocks() * block_size;
    const size_t esize = kv_type_size(type);
    // Unwritten slots hold NaN (0xFF bytes are a NaN in f32 and in f16).
    std::vector<uint8_t> k(num_slots * kv_dim * esize, 0xFF), v(num_slots * kv_dim * esize, 0xFF);
    for (int64_t p = 0; p < dims.len; ++p) {
      int64_t slot = int64_t{table[p / block_size]} * block_size + p % block_size;
      store_kv_token(type, shape, block_size, 2 * num_blocks(), slot, &k_seq[p * kv_dim], k.data());
      store_kv_token(type, shape, block_size, 2 * num_blocks(), slot, &v_seq[p * kv_dim], v.data());
    }
    std::vector<float> qb;
    std::vector<int32_t> pos, seq;
    for (int32_t t : tokens) {
      qb.insert(qb.end(), q.begin() + t * q_dim, q.begin() + (t + 1) * q_dim);
      pos.push_back(t);
      seq.push_back(0);
    }
    std::vector<float> out(tokens.size() * q_dim);
    AttentionBatch batch{qb.data(), pos.data(), seq.data(), table.data(),
                         static_cast<int32_t>(table.size()), static_cast<int64_t>(tokens.size())};
    ThreadPool pool(threads);
    paged_attention(pool, shape, batch, {k.data(), v.data(), block_size, 2 * num_blocks(), type}, out.data());
    return out;
  }

  // Distinct physical blocks out of twice as many, in a shuffled order.
  std::vector<int32_t> scattered_table(uint32_t seed) const {
    std::vector<int32_t> t(2 * num_blocks());
    for (int32_t i = 0; i < 2 * num_blocks(); ++i) t[i] = i;
    std::mt19937 rng(seed);
    std::shuffle(t.begin(), t.end(), rng);
    t.resize(num_blocks());
    return t;
  }
};

class PagedAttention : public testing::TestWithParam<std::tuple<KvType, Dims>> {};

TEST_P(PagedAttention, MatchesContiguousReference) {
  Fixture f(std::get<1>(GetParam()), std::get<0>(GetParam()));
  const int32_t hd = f.dims.head_dim, group = f.dims.heads / f.dims.kv_heads;
  // f16 keys/values carry a relative rounding error of 2^-11.
  const double tol = f.type == KvType::kF16 ? 4e-3 : 1e-5;
  std::vector<int32_t> all(f.dims.len);
  for (int i = 0; i < f.dims.len; ++i) all[i] = i;
  auto out = f.run(f.scattered_table(3), all, 2);
  for (int64_t t = 0; t < f.dims.len; ++t) {
    for (int h = 0; h < f.dims.heads; ++h) {
      const int kvh = h / group;
      std::vector<double> s(t + 1);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double acc = 0;
        for (int d = 0; d < hd; ++d) acc += double{f.q[t * f.q_dim + h * hd + d]} * f.k_seq[j * f.kv_dim + kvh * hd + d];
        s[j] = acc / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int d = 0; d < hd; ++d) {
        double ref = 0;
        for (int64_t j = 0; j <= t; ++j) ref += s[j] / sum * f.v_seq[j * f.kv_dim + kvh * hd + d];
        ASSERT_NEAR(out[t * f.q_dim + h * hd + d], ref, tol) << t << " " << h << " " << d;
      }
    }
  }
}

TEST_P(PagedAttention, OutputIgnoresBlockPlacementBatchAndThreads) {
  Fixture f(std::get<1>(GetParam()), std::get<0>(GetParam()));
  const int32_t last = static_cast<int32_t>(f.dims.len - 1);
  const size_t bytes = f.q_dim * sizeof(float);
  std::vector<int32_t> identity(f.num_blocks());
  for (int32_t i = 0; i < f.num_blocks(); ++i) identity[i] = i;
  auto last_alone = f.run(identity, {last}, 1);
  auto moved = f.run(f.scattered_table(1), {last}, 1);
  auto in_batch = f.run(f.scattered_table(1), {last - 3, last - 2, last - 1, last}, 3);
  EXPECT_EQ(0, std::memcmp(last_alone.data(), moved.data(), bytes));
  EXPECT_EQ(0, std::memcmp(last_alone.data(), in_batch.data() + 3 * f.q_dim, bytes));
}

INSTANTIATE_TEST_SUITE_P(
    KvTypesAndShapes, PagedAttention,
    testing::Combine(testing::Values(KvType::kF32, KvType::kF16),
                     // The weighted sum's chunks of 1, 2, 4 and 8 vectors (groups of 2 to 9 heads,
                     // 1 to 16 vectors a head, with and without a scalar tail), over one to three
                     // tiles of 16 keys.
                     testing::Values(Dims{4, 2, 8, 13}, Dims{18, 2, 12, 37}, Dims{3, 3, 20, 21},
                                     Dims{8, 2, 128, 40}, Dims{4, 2, 64, 35}, Dims{2, 2, 64, 20})),
    [](const auto& info) {
      const Dims d = std::get<1>(info.param);
      return std::string(kv_type_name(std::get<0>(info.param))) + "_h" + std::to_string(d.heads) + "_kv" +
             std::to_string(d.kv_heads) + "_d" + std::to_string(d.head_dim) + "_n" + std::to_string(d.len);
    });

// Each kv head has its own region of the cache, the blocks' rows one after another in it: the
// rows of consecutive slots of one head are one run, and every element is written by one row.
TEST(StoreKv, TokenRowsAreGroupedByHeadThenBlock) {
  const AttentionShape shape{4, 2, 3, 1.0f};  // 2 kv heads of 3
  constexpr int32_t kBlock = 4;
  constexpr int64_t kBlocks = 3;
  std::vector<float> cache(kBlocks * kBlock * 2 * 3, -1.0f);
  for (int64_t slot = 0; slot < kBlocks * kBlock; ++slot) {
    const float token[6] = {slot * 10.0f, slot * 10.0f + 1, slot * 10.0f + 2,   // kv head 0
                            slot * 10.0f + 5, slot * 10.0f + 6, slot * 10.0f + 7};  // kv head 1
    store_kv_token(KvType::kF32, shape, kBlock, kBlocks, slot, token, cache.data());
  }
  // Head 1's region: slots 0..11 in order.
  std::vector<float> head1(cache.begin() + kBlocks * kBlock * 3, cache.end()), expected;
  for (int slot = 0; slot < kBlocks * kBlock; ++slot) {
    for (int d = 0; d < 3; ++d) expected.push_back(slot * 10.0f + 5 + d);
  }
  EXPECT_EQ(head1, expected);
  EXPECT_EQ(kv_row_offset(shape, kBlock, kBlocks, 2, 1, 3), (1 * kBlocks * kBlock + 2 * kBlock + 3) * 3);
  EXPECT_EQ(cache[kv_row_offset(shape, kBlock, kBlocks, 1, 0, 2)], 60.0f);  // slot 6, head 0
}

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

// silu_mul (activation.cc) against the formula in double: vector body and padded tail, the
// extremes (exp clamped at 88: -inf-like inputs give -0, large inputs give x * b).
TEST(SiluMul, MatchesFormulaAcrossRangeAndTail) {
  std::vector<float> a, b;
  for (int i = 0; i < 203; ++i) {  // 25 vectors of 8 and a tail of 3
    a.push_back(-30.0f + 0.3f * i);
    b.push_back(0.5f + 0.01f * i);
  }
  for (float x : {0.0f, -0.0f, 1e-30f, -87.0f, -89.0f, -200.0f, -3e38f, 88.0f, 200.0f, 3e38f}) {
    a.push_back(x);
    b.push_back(1.0f);
  }
  const std::vector<float> in = a;
  silu_mul(a.data(), b.data(), static_cast<int64_t>(a.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = in[i];
    const double ref = x / (1.0 + std::exp(-x)) * b[i];
    EXPECT_TRUE(std::isfinite(a[i])) << x;
    EXPECT_NEAR(a[i], ref, 4e-7 * std::max(1.0, std::abs(ref))) << "x = " << x;
  }
}

}  // namespace
}  // namespace sluice::kernels
