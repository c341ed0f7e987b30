// What the machine's memory allows, for defaults that scale with it.
#pragma once

#include <cstdint>

namespace sluice {

// MemAvailable of /proc/meminfo in bytes (the kernel's estimate of what can be allocated without
// swapping); 0 when it cannot be read.
int64_t available_memory_bytes();

}  // namespace sluice
