// GGUF reader: a validated, zero-copy view of a GGUF v2/v3 file.
//
// The file is memory-mapped (or held in a buffer, for models made in memory). Parsing checks
// everything it reads against the file's bounds: magic, version, counts, string lengths,
// value types, nesting depth, tensor dims, types, alignment, and that each tensor's bytes lie
// inside the data section. A corrupt file yields an error naming what is wrong and at which
// byte offset; no read ever goes out of bounds. Strings, numeric arrays and tensor data are
// views into the mapping and live as long as the File.
//
// Thread-safety: immutable after open(); safe to share between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "gguf/gguf_types.h"

namespace sluice::gguf {

// A metadata value. Scalars are decoded; strings and arrays of scalars point into the file.
struct Value {
  ValueType type = ValueType::kU8;
  uint64_t u64 = 0;  // kU8 .. kU64 and kBool
  int64_t i64 = 0;   // kI8 .. kI64
  double f64 = 0;    // kF32, kF64
  std::string_view str;

  // Arrays (type == kArray).
  ValueType elem_type = ValueType::kU8;
  uint64_t count = 0;
  const uint8_t* elems = nullptr;          // fixed-size scalar elements, little-endian
  std::vector<std::string_view> strings;   // when elem_type == kString
  std::vector<Value> arrays;               // when elem_type == kArray

  // Any integer type (and bool) as int64; nullopt for other types or a u64 above INT64_MAX.
  std::optional<int64_t> as_int() const;
  // Floats and integers as double.
  std::optional<double> as_float() const;
  // Element i of an array of fixed-size scalars. REQUIRES: i < count, scalar elem_type.
  int64_t int_at(uint64_t i) const;
  double float_at(uint64_t i) const;
  bool is_int_array() const;
  bool is_number_array() const;
  // Human-readable rendering, arrays shortened to their first few elements.
  std::string to_string(size_t max_items = 8) const;
};

struct TensorInfo {
  std::string_view name;
  std::vector<uint64_t> dims;  // dims[0] is the contiguous dimension (ggml's ne[0])
  TensorType type = TensorType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t num_elements = 0;
  uint64_t num_bytes = 0;
  const uint8_t* data = nullptr;

  uint64_t rows() const { return num_elements / dims[0]; }
  std::string shape_string() const;
};

class File {
 public:
  // Memory-maps and validates `path`.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Validates a GGUF image held in memory; `name` stands in for the path in messages.
  static Result<std::unique_ptr<File>> from_buffer(std::vector<uint8_t> bytes, std::string name);

  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  bool is_mapped() const { return mapped_; }

  const std::vector<std::pair<std::string_view, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

  // Typed look-ups: an error names the key when it is missing or has another type.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  // The same, with a default when the key is absent (a present key of the wrong type is an error).
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, std::string_view fallback) const;
  Result<const Value*> get_array(std::string_view key, ValueType elem_type) const;

  // Reads every page of tensor data once, so that first use is not slowed by page faults;
  // calls progress(done_bytes, total_bytes) now and then.
  void prefault(const std::function<void(uint64_t, uint64_t)>& progress) const;

 private:
  File() = default;
  Status parse();

  std::string path_;
  std::vector<uint8_t> buffer_;  // owned bytes when not memory-mapped
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;

  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, Value>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace sluice::gguf
