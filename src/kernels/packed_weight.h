// A quantized weight repacked once at load into the layouts of the 16-row kernels (the amx,
// avx512, avxvnni and avx2 paths, kernel_path.h), in one or both of two forms. The lean form
// (below) holds the levels transposed for vpdpbusd in about the file's bytes; the avx512,
// avxvnni and avx2 paths read it for any number of tokens (matmul_lean.h), the amx path for
// fewer than 8. The tile form, for the amx
// path's tiles: for each group of 16 rows and each chunk of up to 32 sub-blocks,
// the levels already decoded and transposed (decoded_chunk.h's DecodedChunk<16>: 32-bit lane r of
// step j = row r's levels 4j..4j+3, the weight operand of an AMX tile and of a vpdpbusd) with the
// scales as int32 and floats beside them. Those kernels then read it in place instead of
// decoding the chunk for every call, which is most of a small batch's time.
//
// Only the fields a type reads are stored: levels and d always (32 + 4 bytes per 32 weights of a
// row), the integer scales for the super-block types (+4), mins and dmin for the types with a min
// (+6... all as int32 and float). So the copy takes 1.125 bytes per weight for Q8_0, Q4_0, Q5_0 and
// IQ4_NL, 1.375 for Q3_K, Q6_K and IQ4_XS, 1.5 for Q4_1 and Q5_1, 1.75 for Q2_K, Q4_K and Q5_K,
// beside the lean form.
//
// The levels and scales are the decoder's own output, so a packed weight gives the same bits as
// decoding at run time (the kernel tests compare them with memcmp).
#pragma once

#include <cstdint>
#include <memory>

#include "common/thread_pool.h"
#include "kernels/decoded_chunk.h"
#include "kernels/matmul.h"

namespace sluice::kernels {

// Which forms of a PackedWeight to build: the tile form (chunk(): the amx kernels, 8 tokens and
// more) and the lean form (lean_group(): the lean kernels), where the type has one.
struct PackForms {
  bool tiles = true;
  bool lean = true;
};

class PackedWeight {
 public:
  static constexpr int kRows = 16;

  // Whether the packed form exists for this type (every block-quantized type).
  static bool packs(gguf::TensorType type);
  using Forms = PackForms;
  // REQUIRES: packs(w.type). Decodes every row group, in parallel on the pool.
  static std::unique_ptr<PackedWeight> pack(const WeightView& w, ThreadPool& pool, Forms forms = {});
  // The bytes pack() would allocate.
  static size_t planned_bytes(const WeightView& w, Forms forms);

  ~PackedWeight();
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;

  // Chunk k (sub-blocks 32k .. 32k + 31, fewer in the last) of row group g. REQUIRES: tiles().
  bool tiles() const { return data_ != nullptr; }
  ChunkRef<kRows> chunk(int64_t g, int64_t k) const;
  size_t bytes() const { return size_ + lean_size_; }
  size_t tile_bytes() const { return size_; }
  size_t lean_bytes() const { return lean_size_; }

  // The lean form (the lean kernels of the avx512, avxvnni and avx2 code, matmul_lean*.cc): about as
  // many bytes as the file's (Q2_K 3.125 bits a weight against the file's 2.625, Q3_K 3.5625
  // against 3.4375: their scales stored a byte each), laid out for vpdpbusd, for every
  // block-quantized type. Per row group, arrays over sub-blocks b = 0 .. num_blocks - 1 (d and
  // dmin: over the type's blocks), each contiguous, so a group is one stream:
  //
  //   levels[b]  the transposed levels (lane r of step j = row r's levels 4j..4j+3) as unsigned
  //              u = q + offset, in as many 64-byte vectors as a level has bits: Q8_0 8 steps;
  //              Q2_K vector p holding step 4p + k in bits 2k, 2k + 1 of each byte; Q4_*,
  //              IQ4_NL, IQ4_XS (the table indices) vector p holding step 2p in its low nibbles
  //              and 2p + 1 in its high ones; Q3_K likewise in bits 0-2 and 4-6 for p < 3, and
  //              bit k of steps 6 and 7 in bits 3 and 7 of vector k; Q5_* vector j holding step
  //              j < 5 in bits 0-4, and steps 5-7 as one 15-bit string in bits 5-7 of the five
  //              (bit s in bit 5 + s % 3 of vector s / 3); Q6_K vector j holding step j < 6 in
  //              bits 0-5, and bits 2k, 2k + 1 of step 6 (7) in bits 6, 7 of vector k (3 + k).
  //              So each step is one mask, or a shift and a mask, or (the last steps of Q3_K,
  //              Q5_*, Q6_K) a few shifts and masks gathering its bits.
  //   sc[b]      super-block types: the integer scales as int8, 16 (or 32: per half, Q2_K,
  //              Q3_K, Q6_K)
  //   m[b]       Q2_K, Q4_K, Q5_K: the integer mins as uint8, 16 (Q2_K: 32, per half)
  //   d, dmin    16 halves per block of the type (dmin: types with a min)
  //
  // The dot products are sum(u x) - offset * sum(x), with sum(x) from the activations' 16-element
  // sums (on avx2, Q8_0's and the IQ4 levels go in as the signed q: sum(q x)): the same integers
  // as every other path.
  struct Lean {
    const uint8_t* levels = nullptr;
    const int8_t* sc = nullptr;
    const uint8_t* m = nullptr;
    const uint16_t* d = nullptr;
    const uint16_t* dmin = nullptr;
  };
  // Whether the lean form exists for this type, and its level offset.
  static bool has_lean(gguf::TensorType type);
  static int lean_offset(gguf::TensorType type);
  bool lean() const { return lean_data_ != nullptr; }
  Lean lean_group(int64_t g) const;
  size_t lean_group_bytes() const { return lean_group_bytes_; }

 private:
  PackedWeight() = default;
  size_t field_offset(int field, int nb) const;
  void layout(const WeightView& w, Forms forms);
  void lean_layout(const WeightView& w);
  void pack_lean(const WeightView& w, ThreadPool& pool);

  gguf::TensorType type_{};
  bool scales_ = false, mins_ = false;
  int64_t num_blocks_ = 0;      // sub-blocks per row
  size_t full_chunk_bytes_ = 0;  // a chunk of 32 sub-blocks
  size_t group_bytes_ = 0;
  uint8_t* data_ = nullptr;  // 64-byte aligned
  size_t size_ = 0;
  size_t lean_offsets_[5] = {};  // of levels, sc, m, d, dmin in a group
  size_t lean_group_bytes_ = 0;
  uint8_t* lean_data_ = nullptr;
  size_t lean_size_ = 0;
};

}  // namespace sluice::kernels
