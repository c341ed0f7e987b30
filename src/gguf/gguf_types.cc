#include "gguf/gguf_types.h"

#include <algorithm>
#include <array>

namespace sluice::gguf {

uint32_t value_type_size(ValueType type) {
  switch (type) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: return 8;
    case ValueType::kString: case ValueType::kArray: return 0;
  }
  return 0;
}

bool value_type_known(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::kF64); }

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
    case ValueType::kBool:
      return true;
    default:
      return false;
  }
}

bool is_unsigned_type(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64 || t == ValueType::kBool;
}

std::string_view value_type_name(ValueType type) {
  static constexpr std::array<std::string_view, 13> kNames = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  auto raw = static_cast<uint32_t>(type);
  return raw < kNames.size() ? kNames[raw] : "unknown";
}

namespace {
struct TypeEntry {
  uint32_t id;
  TensorTypeTraits traits;
};
// Block layouts from ggml (ggml-common.h); QK_K = 256.
constexpr TypeEntry kTensorTypes[] = {
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
};
}  // namespace

std::optional<TensorTypeTraits> tensor_type_traits(uint32_t raw) {
  for (const auto& e : kTensorTypes) {
    if (e.id == raw) return e.traits;
  }
  return std::nullopt;
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (const auto& e : kTensorTypes) {
    const std::string_view n = e.traits.name;
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [&](char a, char b) {
          return lower(a) == lower(b);
        })) {
      return static_cast<TensorType>(e.id);
    }
  }
  return std::nullopt;
}

std::string_view tensor_type_name(TensorType type) {
  auto t = tensor_type_traits(static_cast<uint32_t>(type));
  return t ? t->name : "unknown";
}

}  // namespace sluice::gguf
