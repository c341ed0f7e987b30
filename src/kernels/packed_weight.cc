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

void PackedWeight::layout(const WeightView& w, Forms forms) {
  type_ = w.type;
  scales_ = block_elements(w.type) == kSuperBlock;
  mins_ = has_min(w.type);
  num_blocks_ = w.cols / kSubBlock;
  const int64_t groups = (w.rows + kRows - 1) / kRows;
  if (forms.tiles) {
    full_chunk_bytes_ = field_offset(kFields, kChunkSubBlocks);
    const int64_t full_chunks = num_blocks_ / kChunkSubBlocks;
    const int last = static_cast<int>(num_blocks_ % kChunkSubBlocks);
    group_bytes_ = full_chunks * full_chunk_bytes_ + field_offset(kFields, last);
    size_ = std::max<size_t>(64, groups * group_bytes_);
  }
  if (forms.lean && has_lean(w.type)) lean_layout(w);
}

size_t PackedWeight::planned_bytes(const WeightView& w, Forms forms) {
  PackedWeight p;
  p.layout(w, forms);
  return p.size_ + p.lean_size_;
}

std::unique_ptr<PackedWeight> PackedWeight::pack(const WeightView& w, ThreadPool& pool, Forms forms) {
  std::unique_ptr<PackedWeight> p(new PackedWeight());
  p->layout(w, forms);
  if (p->lean_size_ > 0) p->pack_lean(w, pool);
  if (p->size_ == 0) return p;
  p->data_ = static_cast<uint8_t*>(::operator new(p->size_, std::align_val_t{64}));
  const int64_t groups = (w.rows + kRows - 1) / kRows;
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
  return p;
}

PackedWeight::~PackedWeight() {
  if (data_ != nullptr) ::operator delete(data_, std::align_val_t{64});
  if (lean_data_ != nullptr) ::operator delete(lean_data_, std::align_val_t{64});
}

bool PackedWeight::has_lean(gguf::TensorType type) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kQ4_0: case T::kQ4_1: case T::kQ5_0: case T::kQ5_1: case T::kQ8_0: case T::kIQ4_NL:
    case T::kQ2_K: case T::kQ3_K: case T::kQ4_K: case T::kQ5_K: case T::kQ6_K: case T::kIQ4_XS:
      return true;
    default: return false;
  }
}

int PackedWeight::lean_offset(gguf::TensorType type) {
  using T = gguf::TensorType;
  switch (type) {
    case T::kQ3_K: return 4;
    case T::kQ4_0: return 8;
    case T::kQ5_0: return 16;
    case T::kQ6_K: return 32;
    case T::kQ8_0: case T::kIQ4_NL: case T::kIQ4_XS: return 128;
    default: return 0;
  }
}

namespace {

bool table_type(gguf::TensorType t) { return t == gguf::TensorType::kIQ4_NL || t == gguf::TensorType::kIQ4_XS; }

// Bits of the lean form's levels: 8 (Q8_0), 2, 3, 4, 5 or 6.
int lean_bits(gguf::TensorType t) {
  using T = gguf::TensorType;
  switch (t) {
    case T::kQ8_0: return 8;
    case T::kQ2_K: return 2;
    case T::kQ3_K: return 3;
    case T::kQ5_0: case T::kQ5_1: case T::kQ5_K: return 5;
    case T::kQ6_K: return 6;
    default: return 4;
  }
}

// The unsigned level the lean form stores for a decoded level q of the type.
uint8_t lean_level(gguf::TensorType type, int8_t q) {
  if (table_type(type)) {
    for (int i = 0; i < 16; ++i) {
      if (kIq4nlValues[i] == q) return static_cast<uint8_t>(i);
    }
    return 0;  // unreachable: the decoder gives table values
  }
  return static_cast<uint8_t>(q + PackedWeight::lean_offset(type));
}

enum LeanField { kLevels, kLsc, kLm, kLd, kLdmin, kLeanFields };

// A sub-block's lean levels take `bits` vectors of 64 bytes.
size_t level_bytes(int bits) { return size_t{64} * bits; }

// Level u of step j into byte lane_byte of its place in a sub-block's lean levels v, by the
// layout of packed_weight.h (v starts zeroed: fields are ORed in).
void put_lean_level(uint8_t* v, int bits, int j, int lane_byte, uint8_t u) {
  v += lane_byte;
  u = static_cast<uint8_t>(u & ((1 << bits) - 1));  // a level past its bits would spill into others'
  const auto put = [&](int vector, int value) { v[64 * vector] |= static_cast<uint8_t>(value); };
  switch (bits) {
    case 8: return put(j, u);
    case 4: return put(j / 2, u << (4 * (j % 2)));
    case 2: return put(j / 4, u << (2 * (j % 4)));
    case 3:  // steps 6, 7: bit k in bit 3 or 7 of vector k
      if (j < 6) return put(j / 2, u << (4 * (j % 2)));
      for (int k = 0; k < 3; ++k) put(k, ((u >> k) & 1) << (j == 6 ? 3 : 7));
      return;
    case 5:  // steps 5-7: one 15-bit string, bit s in bit 5 + s % 3 of vector s / 3
      if (j < 5) return put(j, u);
      for (int i = 0; i < 5; ++i) {
        const int s = 5 * (j - 5) + i;
        put(s / 3, ((u >> i) & 1) << (5 + s % 3));
      }
      return;
    case 6:  // steps 6, 7: bits 2k, 2k + 1 in bits 6, 7 of vector k or 3 + k
      if (j < 6) return put(j, u);
      for (int k = 0; k < 3; ++k) put(3 * (j - 6) + k, ((u >> (2 * k)) & 3) << 6);
      return;
    default: return;
  }
}

}  // namespace

void PackedWeight::lean_layout(const WeightView& w) {
  const int bits = lean_bits(w.type);
  const bool super = block_elements(w.type) == kSuperBlock, halves = has_half_scales(w.type);
  const int64_t nb = num_blocks_, blocks = super ? nb / 8 : nb;
  const size_t sizes[kLeanFields] = {
      static_cast<size_t>(nb) * level_bytes(bits),
      static_cast<size_t>(super ? nb * (halves ? 32 : 16) : 0),
      static_cast<size_t>(super && mins_ ? nb * (halves ? 32 : 16) : 0),
      static_cast<size_t>(blocks) * kRows * 2,
      static_cast<size_t>(mins_ ? blocks * kRows * 2 : 0)};
  size_t off = 0;
  for (int f = 0; f < kLeanFields; ++f) {
    lean_offsets_[f] = off;
    off += (sizes[f] + 63) / 64 * 64;  // every array starts on a cache line
  }
  lean_group_bytes_ = off;
  const int64_t groups = (w.rows + kRows - 1) / kRows;
  lean_size_ = std::max<size_t>(64, groups * lean_group_bytes_);
}

void PackedWeight::pack_lean(const WeightView& w, ThreadPool& pool) {
  const int bits = lean_bits(w.type);
  const bool super = block_elements(w.type) == kSuperBlock, halves = has_half_scales(w.type);
  const int64_t nb = num_blocks_;
  const int64_t groups = (w.rows + kRows - 1) / kRows;
  lean_data_ = static_cast<uint8_t*>(::operator new(lean_size_, std::align_val_t{64}));
  std::memset(lean_data_, 0, lean_size_);
  const gguf::TensorType type = w.type;
  pool.parallel_for(groups, [&, bits, super, halves](int64_t begin, int64_t end) {
    Decoded32 dec;
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* rows[kRows];
      group_rows(w, g, rows);
      uint8_t* base = lean_data_ + g * lean_group_bytes_;
      uint8_t* levels = base + lean_offsets_[kLevels];
      auto* sc = reinterpret_cast<int8_t*>(base + lean_offsets_[kLsc]);
      uint8_t* m = base + lean_offsets_[kLm];
      auto* d = reinterpret_cast<uint16_t*>(base + lean_offsets_[kLd]);
      auto* dmin = reinterpret_cast<uint16_t*>(base + lean_offsets_[kLdmin]);
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t block = super ? b / 8 : b;
        for (int r = 0; r < kRows; ++r) {
          decode_block32(type, rows[r], b, dec);
          d[block * kRows + r] = f32_to_f16(dec.d);
          if (mins_) dmin[block * kRows + r] = f32_to_f16(dec.dmin);
          if (super) {
            if (halves) {
              sc[b * 32 + r] = static_cast<int8_t>(dec.sc[0]);
              sc[b * 32 + 16 + r] = static_cast<int8_t>(dec.sc[1]);
            } else {
              sc[b * 16 + r] = static_cast<int8_t>(dec.sc[0]);
            }
            if (mins_ && halves) {  // Q2_K: a min per 16 too
              m[b * 32 + r] = static_cast<uint8_t>(dec.m[0]);
              m[b * 32 + 16 + r] = static_cast<uint8_t>(dec.m[1]);
            } else if (mins_) {
              m[b * 16 + r] = static_cast<uint8_t>(dec.m[0]);
            }
          }
          for (int e = 0; e < kSubBlock; ++e) {
            // Step e / 4, byte 4 r + e % 4 of the step's 64-byte vector.
            put_lean_level(levels + b * level_bytes(bits), bits, e / 4, 4 * r + e % 4, lean_level(type, dec.q[e]));
          }
        }
      }
    }
  });
}

PackedWeight::Lean PackedWeight::lean_group(int64_t g) const {
  const uint8_t* base = lean_data_ + g * lean_group_bytes_;
  Lean l;
  l.levels = base + lean_offsets_[kLevels];
  l.sc = reinterpret_cast<const int8_t*>(base + lean_offsets_[kLsc]);
  l.m = base + lean_offsets_[kLm];
  l.d = reinterpret_cast<const uint16_t*>(base + lean_offsets_[kLd]);
  l.dmin = reinterpret_cast<const uint16_t*>(base + lean_offsets_[kLdmin]);
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
