// Parsing works through a Cursor that checks every read against the end of the file, so a
// corrupt count or length turns into an error naming the field and its byte offset.
#include "gguf/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/ranges.h>

#include "common/check.h"
#include "common/utf8.h"

namespace sluice::gguf {
namespace {

constexpr int kMaxArrayDepth = 8;
// Arrays nested in arrays, over the whole file. Each takes 12 bytes of the file but a Value
// (about ten times that) in memory, so without a cap a file of them would cost memory many times
// its size. Real models have none or a handful.
constexpr uint64_t kMaxNestedArrays = 1u << 18;
constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS

class Cursor {
 public:
  Cursor(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return Status::error(fmt::format("truncated file: {} at offset {} needs {} bytes, only {} left",
                                       what, pos_, n, remaining()));
    }
    return Status::ok();
  }

  template <typename T>
  Result<T> read(std::string_view what) {
    SLUICE_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string_view> read_string(std::string_view what) {
    uint64_t at = pos_;
    SLUICE_ASSIGN_OR_RETURN(uint64_t len, read<uint64_t>(what));
    if (len > remaining()) {
      return Error("{} at offset {}: string length {} runs past end of file ({} bytes left)", what,
                   at, len, remaining());
    }
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return s;
  }

  // A key or tensor name: text of at most kMaxName bytes (GGUF's keys are at most 65535 bytes,
  // tensor names 64 in ggml), so that a corrupt length or bytes never reach a message raw.
  Result<std::string_view> read_name(std::string_view what) {
    const uint64_t at = pos_;
    SLUICE_ASSIGN_OR_RETURN(std::string_view s, read_string(what));
    if (s.size() > kMaxName) {
      return Error("{} at offset {} is {} bytes long (at most {}): the file is corrupt", what, at, s.size(), kMaxName);
    }
    const bool control = std::ranges::any_of(s, [](char ch) { return static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
    if (control || utf8_valid_prefix_length(s) != s.size()) {
      return Error("{} at offset {} is not text (control characters or invalid UTF-8): the file is corrupt", what, at);
    }
    return s;
  }
  static constexpr uint64_t kMaxName = 65535;

  const uint8_t* here() const { return base_ + pos_; }
  void skip(uint64_t n) { pos_ += n; }

  // Takes n arrays from the file's nested-array budget; false when it is spent.
  bool take_nested(uint64_t n) {
    if (n > nested_left_) return false;
    nested_left_ -= n;
    return true;
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t nested_left_ = kMaxNestedArrays;
};

Status read_value(Cursor& c, ValueType type, Value& out, int depth, std::string_view key);

Status read_scalar(Cursor& c, ValueType type, Value& out, std::string_view key) {
  out.type = type;
  auto what = fmt::format("value of '{}'", key);
  switch (type) {
#define SLUICE_READ_(vt, T, field)                               \
  case ValueType::vt: {                                          \
    auto v = c.read<T>(what);                                    \
    if (!v) return v.error();                                    \
    out.field = *v;                                              \
    return Status::ok();                                         \
  }
    SLUICE_READ_(kU8, uint8_t, u64)
    SLUICE_READ_(kU16, uint16_t, u64)
    SLUICE_READ_(kU32, uint32_t, u64)
    SLUICE_READ_(kU64, uint64_t, u64)
    SLUICE_READ_(kI8, int8_t, i64)
    SLUICE_READ_(kI16, int16_t, i64)
    SLUICE_READ_(kI32, int32_t, i64)
    SLUICE_READ_(kI64, int64_t, i64)
    SLUICE_READ_(kF32, float, f64)
    SLUICE_READ_(kF64, double, f64)
#undef SLUICE_READ_
    case ValueType::kBool: {
      uint64_t at = c.pos();
      auto v = c.read<uint8_t>(what);
      if (!v) return v.error();
      if (*v > 1) return Status::error(fmt::format("{} at offset {}: bool byte is {}, not 0 or 1", what, at, *v));
      out.u64 = *v;
      return Status::ok();
    }
    case ValueType::kString: {
      auto s = c.read_string(what);
      if (!s) return s.error();
      out.str = *s;
      return Status::ok();
    }
    case ValueType::kArray: break;
  }
  SLUICE_CHECK(false) << "read_scalar on array";
  return Status::ok();
}

Status read_array(Cursor& c, Value& out, int depth, std::string_view key) {
  out.type = ValueType::kArray;
  if (depth >= kMaxArrayDepth) {
    return Status::error(fmt::format("array '{}' at offset {} nests deeper than {} levels", key,
                                     c.pos(), kMaxArrayDepth));
  }
  uint64_t at = c.pos();
  auto raw_type = c.read<uint32_t>(fmt::format("array type of '{}'", key));
  if (!raw_type) return raw_type.error();
  if (!value_type_known(*raw_type)) {
    return Status::error(fmt::format("array '{}' at offset {}: unknown element type {}", key, at, *raw_type));
  }
  out.elem_type = static_cast<ValueType>(*raw_type);
  auto count = c.read<uint64_t>(fmt::format("array length of '{}'", key));
  if (!count) return count.error();
  out.count = *count;
  // Every element takes at least this many bytes, which bounds the count before allocating.
  uint64_t min_elem = value_type_size(out.elem_type);
  if (out.elem_type == ValueType::kString) min_elem = 8;
  if (out.elem_type == ValueType::kArray) min_elem = 12;
  if (out.count > c.remaining() / min_elem) {
    return Status::error(fmt::format("array '{}' at offset {}: {} elements of type {} cannot fit in the {} bytes left",
                                     key, at, out.count, value_type_name(out.elem_type), c.remaining()));
  }
  if (out.elem_type == ValueType::kString) {
    out.strings.reserve(out.count);
    for (uint64_t i = 0; i < out.count; ++i) {
      auto s = c.read_string(fmt::format("element {} of '{}'", i, key));
      if (!s) return s.error();
      out.strings.push_back(*s);
    }
  } else if (out.elem_type == ValueType::kArray) {
    if (!c.take_nested(out.count)) {
      return Status::error(fmt::format("array '{}' at offset {}: the file's metadata nests more than {} arrays in "
                                       "arrays, more than sluice reads", key, at, kMaxNestedArrays));
    }
    out.arrays.resize(out.count);
    for (uint64_t i = 0; i < out.count; ++i) {
      Status s = read_value(c, ValueType::kArray, out.arrays[i], depth + 1, key);
      if (!s) return s;
    }
  } else {
    out.elems = c.here();
    if (out.elem_type == ValueType::kBool) {
      for (uint64_t i = 0; i < out.count; ++i) {
        if (out.elems[i] > 1) {
          return Status::error(fmt::format("array '{}': element {} at offset {} is bool byte {}",
                                           key, i, c.pos() + i, out.elems[i]));
        }
      }
    }
    c.skip(out.count * min_elem);
  }
  return Status::ok();
}

Status read_value(Cursor& c, ValueType type, Value& out, int depth, std::string_view key) {
  if (type == ValueType::kArray) return read_array(c, out, depth, key);
  return read_scalar(c, type, out, key);
}

}  // namespace

// ---- File -------------------------------------------------------------------------------

File::~File() {
  if (mapped_ && base_ != nullptr) munmap(const_cast<uint8_t*>(base_), size_);
}

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever; it is then refused
  // below as not a regular file (the flag changes nothing for one).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Error("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error("'{}' is not a regular file", path);
  }
  std::unique_ptr<File> file(new File());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    return Error("'{}' is empty, not a GGUF file", path);
  }
  void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return Error("cannot map '{}': {}", path, std::strerror(errno));
  file->base_ = static_cast<const uint8_t*>(p);
  file->mapped_ = true;
  Status s = file->parse();
  if (!s) return Error(s.with_context(path));
  return file;
}

Result<std::unique_ptr<File>> File::from_buffer(std::vector<uint8_t> bytes, std::string name) {
  std::unique_ptr<File> file(new File());
  file->path_ = std::move(name);
  file->buffer_ = std::move(bytes);
  file->base_ = file->buffer_.data();
  file->size_ = file->buffer_.size();
  Status s = file->parse();
  if (!s) return Error(s.with_context(file->path_));
  return file;
}

Status File::parse() {
  Cursor c(base_, size_);
  auto magic = c.read<uint32_t>("magic");
  if (!magic) return magic.error();
  if (*magic != kMagic) {
    char m[5] = {};
    std::memcpy(m, base_, 4);
    for (char& ch : m) if (ch && (ch < 32 || ch > 126)) ch = '?';
    return Status::error(fmt::format("not a GGUF file: magic is '{}' (0x{:08x}), expected 'GGUF'", m, *magic));
  }
  auto version = c.read<uint32_t>("version");
  if (!version) return version.error();
  if (*version != 2 && *version != 3) {
    if (const uint32_t swapped = std::byteswap(*version); swapped >= 1 && swapped <= 3) {
      return Status::error(fmt::format("a big-endian GGUF file (version {} with its bytes swapped); sluice reads "
                                       "little-endian GGUF only: convert the model on a little-endian machine",
                                       swapped));
    }
    return Status::error(fmt::format("unsupported GGUF version {} (supported: 2, 3)", *version));
  }
  version_ = *version;
  auto num_tensors = c.read<uint64_t>("tensor count");
  if (!num_tensors) return num_tensors.error();
  auto num_kv = c.read<uint64_t>("metadata count");
  if (!num_kv) return num_kv.error();
  // A key-value pair needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8+4+8+4+8.
  if (*num_kv > c.remaining() / 13) {
    return Status::error(fmt::format("metadata count {} cannot fit in a file of {} bytes", *num_kv, size_));
  }
  if (*num_tensors > c.remaining() / 32) {
    return Status::error(fmt::format("tensor count {} cannot fit in a file of {} bytes", *num_tensors, size_));
  }

  metadata_.reserve(*num_kv);
  for (uint64_t i = 0; i < *num_kv; ++i) {
    auto key = c.read_name(fmt::format("key of metadata entry {}", i));
    if (!key) return key.error();
    if (metadata_index_.contains(*key)) {
      return Status::error(fmt::format("metadata key '{}' appears twice", *key));
    }
    uint64_t at = c.pos();
    auto raw_type = c.read<uint32_t>(fmt::format("type of '{}'", *key));
    if (!raw_type) return raw_type.error();
    if (!value_type_known(*raw_type)) {
      return Status::error(fmt::format("metadata '{}' at offset {}: unknown value type {}", *key, at, *raw_type));
    }
    Value value;
    Status s = read_value(c, static_cast<ValueType>(*raw_type), value, 0, *key);
    if (!s) return s;
    metadata_index_.emplace(*key, metadata_.size());
    metadata_.emplace_back(*key, std::move(value));
  }

  if (const Value* a = find("general.alignment")) {
    auto v = a->as_int();
    if (!v && a->type != ValueType::kU64) {
      return Status::error(fmt::format("general.alignment is {}, not an integer", a->to_string()));
    }
    if (v && (*v <= 0 || !std::has_single_bit(static_cast<uint64_t>(*v)))) {
      return Status::error(fmt::format("general.alignment is {}, not a power of two", a->to_string()));
    }
    if (!v || *v > (1 << 30)) {  // (a u64 past INT64_MAX: no int64)
      return Status::error(fmt::format("general.alignment is {}, more than the 2^30 sluice reads", a->to_string()));
    }
    alignment_ = static_cast<uint32_t>(*v);
  }

  tensors_.reserve(*num_tensors);
  for (uint64_t i = 0; i < *num_tensors; ++i) {
    TensorInfo t;
    auto name = c.read_name(fmt::format("name of tensor {}", i));
    if (!name) return name.error();
    t.name = *name;
    if (tensor_index_.contains(t.name)) return Status::error(fmt::format("tensor '{}' appears twice", t.name));
    auto n_dims = c.read<uint32_t>(fmt::format("dimension count of tensor '{}'", t.name));
    if (!n_dims) return n_dims.error();
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return Status::error(fmt::format("tensor '{}' has {} dimensions (must be 1..{})", t.name, *n_dims, kMaxDims));
    }
    t.num_elements = 1;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = c.read<uint64_t>(fmt::format("dimension {} of tensor '{}'", d, t.name));
      if (!dim) return dim.error();
      if (*dim == 0 || *dim > (uint64_t{1} << 40)) {
        return Status::error(fmt::format("tensor '{}': dimension {} is {}, out of range", t.name, d, *dim));
      }
      if (t.num_elements > (uint64_t{1} << 48) / *dim) {
        return Status::error(fmt::format("tensor '{}': dimensions {}, {} make more than 2^48 elements", t.name,
                                         fmt::join(t.dims, ", "), *dim));
      }
      t.dims.push_back(*dim);
      t.num_elements *= *dim;
    }
    uint64_t type_at = c.pos();
    auto raw_type = c.read<uint32_t>(fmt::format("type of tensor '{}'", t.name));
    if (!raw_type) return raw_type.error();
    auto traits = tensor_type_traits(*raw_type);
    if (!traits) {
      return Status::error(fmt::format("tensor '{}' at offset {}: unknown tensor type {}", t.name, type_at, *raw_type));
    }
    t.type = static_cast<TensorType>(*raw_type);
    if (t.dims[0] % traits->block_size != 0) {
      return Status::error(fmt::format("tensor '{}' ({}): row length {} is not a multiple of the block size {}",
                                       t.name, traits->name, t.dims[0], traits->block_size));
    }
    t.num_bytes = t.num_elements / traits->block_size * traits->type_size;
    auto offset = c.read<uint64_t>(fmt::format("data offset of tensor '{}'", t.name));
    if (!offset) return offset.error();
    if (*offset % alignment_ != 0) {
      return Status::error(fmt::format("tensor '{}': data offset {} is not a multiple of the alignment {}",
                                       t.name, *offset, alignment_));
    }
    t.offset = *offset;
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > size_ && !tensors_.empty()) {
    return Status::error(fmt::format("truncated file: data section starts at {} past end of file (size {})",
                                     data_offset_, size_));
  }
  uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (auto& t : tensors_) {
    if (t.offset > data_size) {  // (an offset near 2^64 would wrap in a sum)
      return Status::error(
          fmt::format("tensor '{}': data offset {} is past the end of the file (its data section "
                      "holds {} bytes)",
                      t.name, t.offset, data_size));
    }
    if (t.num_bytes > data_size - t.offset) {
      return Status::error(fmt::format("tensor '{}': data ends at {} past end of file (size {})", t.name,
                                       data_offset_ + t.offset + t.num_bytes, size_));
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  return Status::ok();
}

const Value* File::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Error("missing metadata key '{}'", key);
  if (v->type != ValueType::kString) return Error("metadata '{}' is {}, expected a string", key, value_type_name(v->type));
  return v->str;
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Error("missing metadata key '{}'", key);
  auto i = v->as_int();
  if (!i && v->type == ValueType::kU64) {
    return Error("metadata '{}' is {}, past the largest integer sluice reads ({})", key, v->u64, INT64_MAX);
  }
  if (!i) return Error("metadata '{}' is {} ({}), expected an integer", key, value_type_name(v->type), v->to_string());
  return *i;
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Error("missing metadata key '{}'", key);
  auto f = v->as_float();
  if (!f) return Error("metadata '{}' is {}, expected a number", key, value_type_name(v->type));
  return *f;
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Error("missing metadata key '{}'", key);
  if (v->type != ValueType::kBool) return Error("metadata '{}' is {}, expected a bool", key, value_type_name(v->type));
  return v->u64 != 0;
}

Result<int64_t> File::get_int_or(std::string_view key, int64_t fallback) const {
  return find(key) ? get_int(key) : Result<int64_t>(fallback);
}
Result<double> File::get_float_or(std::string_view key, double fallback) const {
  return find(key) ? get_float(key) : Result<double>(fallback);
}
Result<bool> File::get_bool_or(std::string_view key, bool fallback) const {
  return find(key) ? get_bool(key) : Result<bool>(fallback);
}
std::string File::get_string_or(std::string_view key, std::string_view fallback) const {
  auto s = get_string(key);
  return std::string(s ? *s : fallback);
}

Result<const Value*> File::get_array(std::string_view key, ValueType elem_type) const {
  const Value* v = find(key);
  if (!v) return Error("missing metadata key '{}'", key);
  if (v->type != ValueType::kArray) return Error("metadata '{}' is {}, expected an array", key, value_type_name(v->type));
  bool ok = v->elem_type == elem_type ||
            (is_integer_type(elem_type) && is_integer_type(v->elem_type)) ||
            (elem_type == ValueType::kF32 && v->is_number_array());
  if (!ok) {
    return Error("metadata '{}' is an array of {}, expected {}", key, value_type_name(v->elem_type),
                 value_type_name(elem_type));
  }
  return v;
}

void File::prefault(const std::function<void(uint64_t, uint64_t)>& progress) const {
  if (data_offset_ >= size_) return;
  const uint64_t total = size_ - data_offset_;
  const uint64_t kPage = 4096, kReport = uint64_t{64} << 20;
  volatile uint8_t sink = 0;
  for (uint64_t off = 0; off < total; off += kPage) {
    sink = sink + base_[data_offset_ + off];
    if (progress && off % kReport == 0) progress(off, total);
  }
  if (progress) progress(total, total);
}

}  // namespace sluice::gguf
