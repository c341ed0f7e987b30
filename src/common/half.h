// IEEE half (f16) and bfloat16 conversions, scalar and exact (round to nearest even).
#pragma once

#include <cstdint>

namespace sluice {

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);

}  // namespace sluice
