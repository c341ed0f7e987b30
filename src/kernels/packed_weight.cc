#include "kernels/packed_weight.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/half.h"
#include "kernels/quant_blocks.h"

namespace sluice::kernels {
namespace {

constexpr int kRows = PackedWeight::kRows;
// Bytes per sub-block of a 16-row group, per field.
constexpr size_t kW = sizeof(int8_t[8][4 * kRows]), kD = sizeof(float[kRows]), kSc = sizeof(int32_t[2][kRows]);
enum Field { kFieldW, kFieldD, kFieldSc, kFieldM, kFieldDmin, kFields };

}  // namespace

bool PackedWeight::packs(gguf::TensorType type) { return is_block_quant(type); }

// A chunk of nb sub-blocks: w[nb] | d[nb] | sc[nb] (super-block types) | m[nb] dmin[nb] (min types).
size_t PackedWeight::field_offset(int field, int nb) const {
  size_t off = 0;
  const size_t sizes[kFields] = {kW, kD, scales_ ? kSc : 0, mins_ ? kSc : 0, mins_ ? kD : 0};
  for (int f = 0; f < field; ++f) off += sizes[f] * nb;
  return off;
}

std::unique_ptr<PackedWeight> PackedWeight::pack(const WeightView& w, ThreadPool& pool) {
  std::unique_ptr<PackedWeight> p(new PackedWeight());
  p->type_ = w.type;
  p->scales_ = block_elements(w.type) == kSuperBlock;
  p->mins_ = has_min(w.type);
  p->num_blocks_ = w.cols / kSubBlock;
  p->full_chunk_bytes_ = p->field_offset(kFields, kChunkSubBlocks);
  const int64_t full_chunks = p->num_blocks_ / kChunkSubBlocks;
  const int last = static_cast<int>(p->num_blocks_ % kChunkSubBlocks);
  p->group_bytes_ = full_chunks * p->full_chunk_bytes_ + p->field_offset(kFields, last);
  const int64_t groups = (w.rows + kRows - 1) / kRows;
  p->size_ = std::max<size_t>(64, groups * p->group_bytes_);
  p->data_ = static_cast<uint8_t*>(::operator new(p->size_, std::align_val_t{64}));
  const int64_t num_chunks = (p->num_blocks_ + kChunkSubBlocks - 1) / kChunkSubBlocks;
  pool.parallel_for(groups, [&](int64_t begin, int64_t end) {
    auto chunk = std::make_unique<DecodedChunk<kRows>>();
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* rows[kRows];
      group_rows(w, g, rows);
      for (int64_t k = 0; k < num_chunks; ++k) {
        const int64_t b0 = k * kChunkSubBlocks;
        const int nb = static_cast<int>(std::min<int64_t>(kChunkSubBlocks, p->num_blocks_ - b0));
        decode_chunk16(w.type, rows, b0, nb, *chunk);
        uint8_t* dst = p->data_ + g * p->group_bytes_ + k * p->full_chunk_bytes_;
        std::memcpy(dst + p->field_offset(kFieldW, nb), chunk->w, kW * nb);
        std::memcpy(dst + p->field_offset(kFieldD, nb), chunk->d, kD * nb);
        if (p->scales_) std::memcpy(dst + p->field_offset(kFieldSc, nb), chunk->sc, kSc * nb);
        if (p->mins_) {
          std::memcpy(dst + p->field_offset(kFieldM, nb), chunk->m, kSc * nb);
          std::memcpy(dst + p->field_offset(kFieldDmin, nb), chunk->dmin, kD * nb);
        }
      }
    }
  });
  if (has_lean(w.type)) p->pack_lean(w, pool);
  return p;
}

PackedWeight::~PackedWeight() {
  ::operator delete(data_, std::align_val_t{64});
  if (lean_data_ != nullptr) ::operator delete(lean_data_, std::align_val_t{64});
}

bool PackedWeight::has_lean(gguf::TensorType type) {
  using T = gguf::TensorType;
  return type == T::kQ4_0 || type == T::kQ4_1 || type == T::kQ5_0 || type == T::kQ5_1 || type == T::kQ8_0 ||
         type == T::kIQ4_NL;
}

int PackedWeight::lean_offset(gguf::TensorType type) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kQ4_0: return 8;
    case T::kQ5_0: return 16;
    case T::kQ8_0: case T::kIQ4_NL: return 128;
    default: return 0;
  }
}

namespace {

// The unsigned level the lean form stores for a decoded level q of the type.
uint8_t lean_level(gguf::TensorType type, int8_t q) {
  if (type == gguf::TensorType::kIQ4_NL) {
    for (int i = 0; i < 16; ++i) {
      if (kIq4nlValues[i] == q) return static_cast<uint8_t>(i);
    }
    return 0;  // unreachable: the decoder gives table values
  }
  return static_cast<uint8_t>(q + PackedWeight::lean_offset(type));
}

}  // namespace

void PackedWeight::pack_lean(const WeightView& w, ThreadPool& pool) {
  const bool bytes8 = w.type == gguf::TensorType::kQ8_0;
  const bool five = w.type == gguf::TensorType::kQ5_0 || w.type == gguf::TensorType::kQ5_1;
  lean_level_bytes_ = bytes8 ? 512 : 256;
  lean_high_bytes_ = five ? 64 : 0;
  const size_t per_block = lean_level_bytes_ + lean_high_bytes_ + (mins_ ? 64 : 32);
  lean_group_bytes_ = (num_blocks_ * per_block + 63) / 64 * 64;
  const int64_t groups = (w.rows + kRows - 1) / kRows;
  lean_size_ = std::max<size_t>(64, groups * lean_group_bytes_);
  lean_data_ = static_cast<uint8_t*>(::operator new(lean_size_, std::align_val_t{64}));
  std::memset(lean_data_, 0, lean_size_);
  pool.parallel_for(groups, [&](int64_t begin, int64_t end) {
    Decoded32 dec;
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* rows[kRows];
      group_rows(w, g, rows);
      uint8_t* levels = lean_data_ + g * lean_group_bytes_;
      uint8_t* high = levels + num_blocks_ * lean_level_bytes_;
      auto* d = reinterpret_cast<uint16_t*>(high + num_blocks_ * lean_high_bytes_);
      uint16_t* dmin = d + num_blocks_ * kRows;
      for (int64_t b = 0; b < num_blocks_; ++b) {
        for (int r = 0; r < kRows; ++r) {
          decode_block32(w.type, rows[r], b, dec);
          d[b * kRows + r] = f32_to_f16(dec.d);
          if (mins_) dmin[b * kRows + r] = f32_to_f16(dec.dmin);
          for (int e = 0; e < kSubBlock; ++e) {
            const uint8_t u = lean_level(w.type, dec.q[e]);
            const int j = e / 4, lane_byte = 4 * r + e % 4;  // step j, byte of the 64-byte step vector
            if (bytes8) {
              levels[b * 512 + 64 * j + lane_byte] = u;
            } else {
              uint8_t& v = levels[b * 256 + 64 * (j / 2) + lane_byte];
              v = static_cast<uint8_t>(v | (u & 15) << (4 * (j % 2)));
              if (five && (u & 16)) high[b * 64 + 8 * j + lane_byte / 8] |= static_cast<uint8_t>(1 << (lane_byte % 8));
            }
          }
        }
      }
    }
  });
}

PackedWeight::Lean PackedWeight::lean_group(int64_t g) const {
  Lean l;
  l.levels = lean_data_ + g * lean_group_bytes_;
  l.high = lean_high_bytes_ > 0 ? l.levels + num_blocks_ * lean_level_bytes_ : nullptr;
  l.d = reinterpret_cast<const uint16_t*>(l.levels + num_blocks_ * (lean_level_bytes_ + lean_high_bytes_));
  l.dmin = mins_ ? l.d + num_blocks_ * kRows : nullptr;
  return l;
}

ChunkRef<PackedWeight::kRows> PackedWeight::chunk(int64_t g, int64_t k) const {
  const int nb = static_cast<int>(std::min<int64_t>(kChunkSubBlocks, num_blocks_ - k * kChunkSubBlocks));
  const uint8_t* base = data_ + g * group_bytes_ + k * full_chunk_bytes_;
  ChunkRef<kRows> c{};
  c.w = reinterpret_cast<const int8_t(*)[8][4 * kRows]>(base + field_offset(kFieldW, nb));
  c.d = reinterpret_cast<const float(*)[kRows]>(base + field_offset(kFieldD, nb));
  if (scales_) c.sc = reinterpret_cast<const int32_t(*)[2][kRows]>(base + field_offset(kFieldSc, nb));
  if (mins_) {
    c.m = reinterpret_cast<const int32_t(*)[2][kRows]>(base + field_offset(kFieldM, nb));
    c.dmin = reinterpret_cast<const float(*)[kRows]>(base + field_offset(kFieldDmin, nb));
  }
  return c;
}

}  // namespace sluice::kernels
