#include "model/kv_pool.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace sluice {

KvPool::KvPool(const ModelConfig& config, int32_t num_blocks, int32_t block_size, KvType type)
    : num_blocks_(num_blocks), block_size_(block_size), kv_dim_(config.kv_dim()), type_(type) {
  bytes_ = size_t{2} * config.num_layers * layer_bytes();
  // Zeroed, so a stale slot can never hold a NaN that a masked-out score would multiply:
  // anonymous pages from mmap, which the kernel maps on first touch, so start-up does not
  // write (and commit) gigabytes up front. 2 MiB aligned, with transparent huge pages asked
  // for (granted where the system allows them on request, as Debian's default "madvise"
  // does): attention reads a run of rows per block from all over the pool, and on 4 KiB pages
  // each run is a TLB miss and a page walk (dearer still in a VM); runs of 4 KiB read 1.5x to
  // 1.7x faster on huge pages on the development VM.
  constexpr size_t kHuge = size_t{2} << 20;
  map_bytes_ = bytes_ + kHuge;
  void* map = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) throw std::bad_alloc();
  map_ = static_cast<uint8_t*>(map);
  const uintptr_t base = reinterpret_cast<uintptr_t>(map_);
  uint8_t* aligned = map_ + ((kHuge - base % kHuge) % kHuge);
  madvise(aligned, bytes_, MADV_HUGEPAGE);  // a refusal leaves 4 KiB pages: the same values
  data_ = aligned;
}

KvPool::~KvPool() { munmap(map_, map_bytes_); }

}  // namespace sluice
