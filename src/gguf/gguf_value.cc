// Value accessors and rendering.
#include <cstring>
#include <limits>

#include "common/check.h"
#include "gguf/gguf_reader.h"

namespace sluice::gguf {

std::optional<int64_t> Value::as_int() const {
  if (!is_integer_type(type)) return std::nullopt;
  if (is_unsigned_type(type)) {
    if (u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u64);
  }
  return i64;
}

std::optional<double> Value::as_float() const {
  if (type == ValueType::kF32 || type == ValueType::kF64) return f64;
  if (is_integer_type(type)) return is_unsigned_type(type) ? static_cast<double>(u64) : static_cast<double>(i64);
  return std::nullopt;
}

bool Value::is_int_array() const { return type == ValueType::kArray && is_integer_type(elem_type); }
bool Value::is_number_array() const {
  return is_int_array() || (type == ValueType::kArray &&
                            (elem_type == ValueType::kF32 || elem_type == ValueType::kF64));
}

int64_t Value::int_at(uint64_t i) const {
  SLUICE_CHECK(is_number_array() && i < count) << "int_at(" << i << ")";
  const uint8_t* p = elems + i * value_type_size(elem_type);
  auto load = [p]<typename T>(T) { T v; std::memcpy(&v, p, sizeof(T)); return v; };
  switch (elem_type) {
    case ValueType::kU8: case ValueType::kBool: return load(uint8_t{});
    case ValueType::kI8: return load(int8_t{});
    case ValueType::kU16: return load(uint16_t{});
    case ValueType::kI16: return load(int16_t{});
    case ValueType::kU32: return load(uint32_t{});
    case ValueType::kI32: return load(int32_t{});
    case ValueType::kU64: return static_cast<int64_t>(load(uint64_t{}));
    case ValueType::kI64: return load(int64_t{});
    case ValueType::kF32: return static_cast<int64_t>(load(float{}));
    case ValueType::kF64: return static_cast<int64_t>(load(double{}));
    default: return 0;
  }
}

double Value::float_at(uint64_t i) const {
  SLUICE_CHECK(is_number_array() && i < count) << "float_at(" << i << ")";
  const uint8_t* p = elems + i * value_type_size(elem_type);
  if (elem_type == ValueType::kF32) { float v; std::memcpy(&v, p, 4); return v; }
  if (elem_type == ValueType::kF64) { double v; std::memcpy(&v, p, 8); return v; }
  return static_cast<double>(int_at(i));
}

std::string Value::to_string(size_t max_items) const {
  switch (type) {
    case ValueType::kString: {
      std::string s(str.substr(0, 120));
      for (auto& ch : s) if (ch == '\n') ch = ' ';
      return fmt::format("\"{}{}\"", s, str.size() > 120 ? "..." : "");
    }
    case ValueType::kBool: return u64 ? "true" : "false";
    case ValueType::kF32: case ValueType::kF64: return fmt::format("{}", f64);
    case ValueType::kArray: {
      std::string out = fmt::format("[{} x {}]", count, value_type_name(elem_type));
      if (count == 0) return out;
      out += " ";
      for (uint64_t i = 0; i < count && i < max_items; ++i) {
        if (i) out += ", ";
        if (elem_type == ValueType::kString) out += fmt::format("\"{}\"", strings[i].substr(0, 24));
        else if (elem_type == ValueType::kArray) out += arrays[i].to_string(2);
        else if (elem_type == ValueType::kF32 || elem_type == ValueType::kF64) out += fmt::format("{}", float_at(i));
        else out += fmt::format("{}", int_at(i));
      }
      if (count > max_items) out += ", ...";
      return out;
    }
    default:
      return is_unsigned_type(type) ? fmt::format("{}", u64) : fmt::format("{}", i64);
  }
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return s + "]";
}

}  // namespace sluice::gguf
