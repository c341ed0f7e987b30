// GGUF value and tensor types, following the GGUF specification (ggml's docs/gguf.md).
//
// Tensor types are the ggml block layouts: a tensor row of n elements is n / block_size
// blocks of type_size bytes. Every type the format defines is known here (so a file's sizes
// can be validated); which of them the kernels compute is a separate question
// (kernels/weight_types.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
inline constexpr uint32_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// Size in bytes of a fixed-size scalar value type; 0 for string and array.
uint32_t value_type_size(ValueType type);
bool value_type_known(uint32_t raw);
std::string_view value_type_name(ValueType type);
// Integer value types (bool counts as one); the unsigned ones.
bool is_integer_type(ValueType type);
bool is_unsigned_type(ValueType type);

enum class TensorType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21,
  kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};

struct TensorTypeTraits {
  std::string_view name;
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
};

// Traits of a raw ggml type id, or nullopt for an id the format does not define.
std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw);
std::string_view tensor_type_name(TensorType type);
// The type of a name as tensor_type_name spells it, in any case ("q4_k", "Q4_K").
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Q8_0 block: one f16 scale and 32 signed bytes; value = d * q.
inline constexpr int kQ8_0BlockSize = 32;
struct BlockQ8_0 {
  uint16_t d;  // IEEE half
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

}  // namespace sluice::gguf
