// GGUF writer (v3): builds a file from metadata and tensors, for tests and `sluice model make`.
//
// Metadata keeps insertion order; setting a key twice replaces the earlier value. Tensor data
// is copied in and laid out at the file's alignment.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_types.h"

namespace sluice::gguf {

// An owned metadata value, for writing. Arrays may nest.
struct OwnedValue {
  ValueType type = ValueType::kU8;
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  std::string str;
  ValueType elem_type = ValueType::kU8;
  std::vector<OwnedValue> items;  // when type == kArray

  static OwnedValue u32(uint32_t v) { return {.type = ValueType::kU32, .u64 = v}; }
  static OwnedValue i32(int32_t v) { return {.type = ValueType::kI32, .i64 = v}; }
  static OwnedValue u64v(uint64_t v) { return {.type = ValueType::kU64, .u64 = v}; }
  static OwnedValue f32(float v) { return {.type = ValueType::kF32, .f64 = v}; }
  static OwnedValue boolean(bool v) { return {.type = ValueType::kBool, .u64 = v ? 1u : 0u}; }
  static OwnedValue string(std::string v) { return {.type = ValueType::kString, .str = std::move(v)}; }
  static OwnedValue array(ValueType elem_type, std::vector<OwnedValue> items) {
    return {.type = ValueType::kArray, .elem_type = elem_type, .items = std::move(items)};
  }
};

struct Value;
// An owned copy of a value read from a file (e.g. to copy tokenizer metadata into a new model).
OwnedValue to_owned(const Value& value);

class Writer {
 public:
  void set(std::string key, OwnedValue value);
  void set_u32(std::string key, uint32_t v) { set(std::move(key), OwnedValue::u32(v)); }
  void set_i32(std::string key, int32_t v) { set(std::move(key), OwnedValue::i32(v)); }
  void set_f32(std::string key, float v) { set(std::move(key), OwnedValue::f32(v)); }
  void set_bool(std::string key, bool v) { set(std::move(key), OwnedValue::boolean(v)); }
  void set_string(std::string key, std::string v) { set(std::move(key), OwnedValue::string(std::move(v))); }
  void set_string_array(std::string key, const std::vector<std::string>& v);
  void set_f32_array(std::string key, const std::vector<float>& v);
  void set_i32_array(std::string key, const std::vector<int32_t>& v);

  // Adds a tensor; dims[0] is the contiguous dimension. REQUIRES: data.size() matches
  // the type's byte size for dims, and the name is new.
  void add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                  std::span<const uint8_t> data);
  void add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                  std::vector<uint8_t> data);
  // Sets general.alignment (a power of two, at most 256); tensors are aligned to it.
  void set_alignment(uint32_t alignment);

  std::vector<uint8_t> to_bytes() const;
  // Written atomically: to a file without a name (O_TMPFILE; where that cannot be, one named
  // PATH.partial-PID-N), checked by `verify` (given a path to read it by: /proc/self/fd/N while
  // it has no name; load it back, say), then named and renamed over PATH with signals held. A
  // failure at any point leaves PATH as it was and no other file; so does a signal, but for
  // SIGKILL between naming and renaming, and but on the named fallback. Refuses to
  // replace anything but a regular file (a device, a directory, a symbolic link); a file
  // replaced keeps its mode.
  using Verify = std::function<Status(const std::string& written)>;
  Status write_file(const std::string& path, const Verify& verify = {}) const;

 private:
  std::vector<uint8_t> header_bytes() const;

  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<uint64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, OwnedValue>> metadata_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = kDefaultAlignment;
};

// Bytes a tensor of `type` with these dims occupies; 0 if dims[0] is not a whole number of blocks.
uint64_t tensor_num_bytes(TensorType type, const std::vector<uint64_t>& dims);

}  // namespace sluice::gguf
