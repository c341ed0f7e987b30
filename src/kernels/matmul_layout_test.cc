// The repacked weight forms (packed_weight.h), checked field by field against decoding the file's
// blocks and against the layout the header documents, on every machine.
#include <cstring>
#include <iostream>
#include <memory>

#include <gtest/gtest.h>

#include "kernels/decoded_chunk.h"
#include "kernels/kernel_path.h"
#include "kernels/matmul_lean.h"
#include "kernels/matmul_test_util.h"
#include "kernels/packed_weight.h"

namespace sluice::kernels {
namespace {

using gguf::TensorType;
using namespace testing;

class MatmulLayoutTest : public ::testing::TestWithParam<TensorType> {};

// The repacked forms hold, for each row group and chunk of sub-blocks, exactly what decoding the
// file's blocks gives (decode_chunk16): the tile form read in place (the amx kernels) and the
// lean form decoded (lean_decode_chunk16: the amx kernels without a tile form). On a machine
// without AMX no matmul reads the tile form nor decodes the lean one, so they are compared here
// field by field, for the fields the type reads and the real rows of a partial last group.
TEST_P(MatmulLayoutTest, RepackedFormsHoldWhatDecodingGives) {
  if (!PackedWeight::packs(GetParam())) GTEST_SKIP() << "not a block-quantized type";
  const TensorType type = GetParam();
  const int64_t rows = 37, cols = test_cols(type), num_blocks = cols / kSubBlock;
  TestWeight w = make_weight(type, rows, cols, 21);
  ThreadPool pool(2);
  const auto packed = PackedWeight::pack(w.view, pool);
  WeightView view = w.view;
  view.packed = packed.get();
  const bool lean = kernel_path_runs(KernelPath::kAvx512);
  if (!lean) std::cout << "lean form not compared: no AVX-512 VNNI on this machine\n";
  const bool super = block_elements(type) == kSuperBlock, min = has_min(type);
  auto want = std::make_unique<DecodedChunk<16>>(), got = std::make_unique<DecodedChunk<16>>();
  for (int64_t g = 0; g * 16 < rows; ++g) {
    const uint8_t* row_ptrs[16];
    const int64_t n = group_rows(w.view, g, row_ptrs);
    for (int64_t b0 = 0, k = 0; b0 < num_blocks; b0 += kChunkSubBlocks, ++k) {
      const int nb = static_cast<int>(std::min<int64_t>(kChunkSubBlocks, num_blocks - b0));
      decode_chunk16(type, row_ptrs, b0, nb, *want);
      std::vector<std::pair<const char*, ChunkRef<16>>> forms = {{"tile form", packed->chunk(g, k)}};
      if (lean) {
        lean_decode_chunk16(view, g, b0, nb, *got);
        forms.emplace_back("lean form", chunk_ref(*got));
      }
      for (const auto& [name, c] : forms) {
        SCOPED_TRACE(::testing::Message() << name << ", group " << g << ", sub-blocks from " << b0);
        for (int i = 0; i < nb; ++i) {
          for (int64_t r = 0; r < n; ++r) {
            for (int j = 0; j < 8; ++j) {
              ASSERT_EQ(0, std::memcmp(&c.w[i][j][4 * r], &want->w[i][j][4 * r], 4)) << "levels, sub-block " << i << " row " << r;
            }
            ASSERT_EQ(0, std::memcmp(&c.d[i][r], &want->d[i][r], sizeof(float))) << "d, sub-block " << i << " row " << r;
            for (int h = 0; h < 2; ++h) {
              if (super) {
                ASSERT_EQ(c.sc[i][h][r], want->sc[i][h][r]) << "scale, sub-block " << i << " row " << r;
              }
              if (min) {
                ASSERT_EQ(c.m[i][h][r], want->m[i][h][r]) << "min, sub-block " << i << " row " << r;
              }
            }
            if (min) {
              ASSERT_EQ(0, std::memcmp(&c.dmin[i][r], &want->dmin[i][r], sizeof(float))) << "dmin, sub-block " << i << " row " << r;
            }
          }
        }
      }
    }
  }
}

// The lean form holds, read back in plain C++ by the layout packed_weight.h documents (not by
// the SIMD kernels), each element's level, and each row's scales, mins and halves, as the file's
// blocks decode: so the layout is checked on every machine, whatever path reads it.
TEST_P(MatmulLayoutTest, LeanFormHoldsTheDocumentedLayout) {
  const TensorType type = GetParam();
  if (!PackedWeight::has_lean(type)) GTEST_SKIP() << "no lean form for this type";
  const int64_t rows = 37, cols = test_cols(type), num_blocks = cols / kSubBlock;
  TestWeight w = make_weight(type, rows, cols, 23);
  ThreadPool pool(2);
  const auto packed = PackedWeight::pack(w.view, pool, {.tiles = false, .lean = true});
  const bool super = block_elements(type) == kSuperBlock, min = has_min(type), halves = has_half_scales(type);
  const bool table = type == TensorType::kIQ4_NL || type == TensorType::kIQ4_XS;
  // Bits a level has: vectors a sub-block.
  const bool five = type == TensorType::kQ5_0 || type == TensorType::kQ5_1 || type == TensorType::kQ5_K;
  const int lb = type == TensorType::kQ8_0   ? 8
                 : type == TensorType::kQ2_K ? 2
                 : type == TensorType::kQ3_K ? 3
                 : type == TensorType::kQ6_K ? 6
                 : five                      ? 5
                                             : 4;
  const int offset = PackedWeight::lean_offset(type);
  for (int64_t g = 0; g * 16 < rows; ++g) {
    const PackedWeight::Lean lean = packed->lean_group(g);
    for (int64_t r = 0; r < std::min<int64_t>(16, rows - 16 * g); ++r) {
      const uint8_t* row = w.view.data + (16 * g + r) * w.view.row_bytes();
      for (int64_t b = 0; b < num_blocks; ++b) {
        SCOPED_TRACE(::testing::Message() << "group " << g << ", row " << r << ", sub-block " << b);
        Decoded32 dec;
        decode_block32(type, row, b, dec);
        for (int e = 0; e < kSubBlock; ++e) {
          const int j = e / 4, lane_byte = static_cast<int>(4 * r) + e % 4;
          const uint8_t* v = lean.levels + b * 64 * lb + lane_byte;
          const auto at = [&](int vector, int shift, int width) { return v[64 * vector] >> shift & ((1 << width) - 1); };
          int u = 0;
          switch (lb) {
            case 8: u = at(j, 0, 8); break;
            case 4: u = at(j / 2, 4 * (j % 2), 4); break;
            case 2: u = at(j / 4, 2 * (j % 4), 2); break;
            case 3:  // steps 6, 7: bit k in bit 3 or 7 of vector k
              u = j < 6 ? at(j / 2, 4 * (j % 2), 3) : 0;
              for (int k = 0; k < 3 && j >= 6; ++k) u |= at(k, j == 6 ? 3 : 7, 1) << k;
              break;
            case 5:  // steps 5-7: a 15-bit string, bit s in bit 5 + s % 3 of vector s / 3
              u = j < 5 ? at(j, 0, 5) : 0;
              for (int i = 0; i < 5 && j >= 5; ++i) u |= at((5 * (j - 5) + i) / 3, 5 + (5 * (j - 5) + i) % 3, 1) << i;
              break;
            case 6:  // steps 6, 7: bits 2k, 2k + 1 in bits 6, 7 of vector k or 3 + k
              u = j < 6 ? at(j, 0, 6) : 0;
              for (int k = 0; k < 3 && j >= 6; ++k) u |= at(3 * (j - 6) + k, 6, 2) << (2 * k);
              break;
          }
          ASSERT_EQ(table ? kIq4nlValues[u] : u - offset, dec.q[e]) << "element " << e;
        }
        const int64_t block = super ? b / 8 : b;
        ASSERT_EQ(lean.d[block * 16 + r], f32_to_f16(dec.d));
        if (min) {
          ASSERT_EQ(lean.dmin[block * 16 + r], f32_to_f16(dec.dmin));
        }
        if (super) {
          const int64_t base = b * (halves ? 32 : 16) + r;
          ASSERT_EQ(lean.sc[base], dec.sc[0]);
          if (halves) {
            ASSERT_EQ(lean.sc[base + 16], dec.sc[1]);
          }
          if (min) {
            ASSERT_EQ(lean.m[base], dec.m[0]);
          }
          if (min && halves) {
            ASSERT_EQ(lean.m[base + 16], dec.m[1]);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulLayoutTest, ::testing::ValuesIn(kMatmulTestTypes), type_name);

}  // namespace
}  // namespace sluice::kernels
