#include "kernels/packed_weight.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

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
  return p;
}

PackedWeight::~PackedWeight() { ::operator delete(data_, std::align_val_t{64}); }

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
