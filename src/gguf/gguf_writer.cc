#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/check.h"
#include "gguf/gguf_reader.h"

namespace sluice::gguf {
namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

void put_value(std::vector<uint8_t>& out, ValueType type, const OwnedValue& v) {
  switch (type) {
    case ValueType::kU8: put<uint8_t>(out, static_cast<uint8_t>(v.u64)); break;
    case ValueType::kI8: put<int8_t>(out, static_cast<int8_t>(v.i64)); break;
    case ValueType::kU16: put<uint16_t>(out, static_cast<uint16_t>(v.u64)); break;
    case ValueType::kI16: put<int16_t>(out, static_cast<int16_t>(v.i64)); break;
    case ValueType::kU32: put<uint32_t>(out, static_cast<uint32_t>(v.u64)); break;
    case ValueType::kI32: put<int32_t>(out, static_cast<int32_t>(v.i64)); break;
    case ValueType::kU64: put<uint64_t>(out, v.u64); break;
    case ValueType::kI64: put<int64_t>(out, v.i64); break;
    case ValueType::kF32: put<float>(out, static_cast<float>(v.f64)); break;
    case ValueType::kF64: put<double>(out, v.f64); break;
    case ValueType::kBool: put<uint8_t>(out, v.u64 ? 1 : 0); break;
    case ValueType::kString: put_string(out, v.str); break;
    case ValueType::kArray:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.items.size());
      for (const auto& item : v.items) put_value(out, v.elem_type, item);
      break;
  }
}

void pad_to(std::vector<uint8_t>& out, uint64_t alignment) {
  while (out.size() % alignment != 0) out.push_back(0);
}

}  // namespace

OwnedValue to_owned(const Value& v) {
  OwnedValue o{.type = v.type, .u64 = v.u64, .i64 = v.i64, .f64 = v.f64, .str = std::string(v.str),
               .elem_type = v.elem_type};
  if (v.type != ValueType::kArray) return o;
  o.items.reserve(v.count);
  for (uint64_t i = 0; i < v.count; ++i) {
    OwnedValue item{.type = v.elem_type};
    switch (v.elem_type) {
      case ValueType::kString: item.str = std::string(v.strings[i]); break;
      case ValueType::kArray: item = to_owned(v.arrays[i]); break;
      case ValueType::kF32: case ValueType::kF64: item.f64 = v.float_at(i); break;
      case ValueType::kU64: {
        std::memcpy(&item.u64, v.elems + 8 * i, 8);
        break;
      }
      case ValueType::kU8: case ValueType::kU16: case ValueType::kU32: case ValueType::kBool:
        item.u64 = static_cast<uint64_t>(v.int_at(i));
        break;
      default: item.i64 = v.int_at(i); break;
    }
    o.items.push_back(std::move(item));
  }
  return o;
}

uint64_t tensor_num_bytes(TensorType type, const std::vector<uint64_t>& dims) {
  auto traits = tensor_type_traits(static_cast<uint32_t>(type));
  if (!traits || dims.empty() || dims[0] % traits->block_size != 0) return 0;
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  return n / traits->block_size * traits->type_size;
}

void Writer::set(std::string key, OwnedValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void Writer::set_string_array(std::string key, const std::vector<std::string>& v) {
  std::vector<OwnedValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(OwnedValue::string(s));
  set(std::move(key), OwnedValue::array(ValueType::kString, std::move(items)));
}

void Writer::set_f32_array(std::string key, const std::vector<float>& v) {
  std::vector<OwnedValue> items;
  items.reserve(v.size());
  for (float f : v) items.push_back(OwnedValue::f32(f));
  set(std::move(key), OwnedValue::array(ValueType::kF32, std::move(items)));
}

void Writer::set_i32_array(std::string key, const std::vector<int32_t>& v) {
  std::vector<OwnedValue> items;
  items.reserve(v.size());
  for (int32_t i : v) items.push_back(OwnedValue::i32(i));
  set(std::move(key), OwnedValue::array(ValueType::kI32, std::move(items)));
}

void Writer::set_alignment(uint32_t alignment) {
  SLUICE_CHECK(alignment > 0 && alignment <= 256 && (alignment & (alignment - 1)) == 0) << alignment;
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                        std::span<const uint8_t> data) {
  add_tensor(std::move(name), type, std::move(dims), std::vector<uint8_t>(data.begin(), data.end()));
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<uint64_t> dims,
                        std::vector<uint8_t> data) {
  SLUICE_CHECK(tensor_num_bytes(type, dims) == data.size())
      << name << ": " << data.size() << " bytes for " << tensor_type_name(type);
  for (const auto& t : tensors_) SLUICE_CHECK(t.name != name) << "duplicate tensor " << name;
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(data)});
}

std::vector<uint8_t> Writer::header_bytes() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type));
    put_value(out, value.type, value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (auto d : t.dims) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  pad_to(out, alignment_);
  return out;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  // Sized once: growing a demo model's 20 MiB by doubling copied it about twice over.
  uint64_t total = out.size();
  for (const auto& t : tensors_) total += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  out.reserve(total);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    pad_to(out, alignment_);
  }
  return out;
}

namespace {

// The directory a path is in ("." for a bare name).
std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status Writer::write_file(const std::string& path, const Verify& verify) const {
  // Only a new file or a regular file is replaced: never a device, a directory or a link.
  struct stat st {};
  const bool replacing = lstat(path.c_str(), &st) == 0;
  if (replacing && S_ISLNK(st.st_mode)) {
    return Status::error(fmt::format("cannot write '{}': it is a symbolic link (name the file it points to)", path));
  }
  if (replacing && !S_ISREG(st.st_mode)) {
    return Status::error(fmt::format("cannot write '{}': it exists and is not a regular file", path));
  }
  // The data goes to a file with no name in the target's directory (O_TMPFILE), named only
  // once complete: a write cut short (a signal, a full disk) leaves nothing behind. Where the
  // file system cannot (an old kernel, some network file systems), to a uniquely named
  // temporary file, removed on failure.
  const std::string dir = directory_of(path);
  // The new file is made beside the old one and renamed over it: that needs the folder.
  if (::access(dir.c_str(), W_OK) != 0 && errno != ENOENT) {
    return Status::error(fmt::format("cannot write '{}': its folder '{}' cannot be written ({}); the file is "
                                     "written beside it, then renamed over it", path, dir, std::strerror(errno)));
  }
  std::string tmp;
  // Naming it takes /proc/self/fd (linking a descriptor directly needs privilege): without
  // /proc (a chroot, a minimal container) the named temporary file is used from the start.
  const bool proc = ::access("/proc/self/fd", X_OK) == 0;
  int fd = proc ? ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666) : -1;
  const bool anonymous = fd >= 0;
  if (!anonymous) {
    if (proc && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      return Status::error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    }
    for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
      tmp = fmt::format("{}.partial-{}-{}", path, ::getpid(), attempt);
      fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
      if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) return Status::error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  }
  FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    if (!anonymous) ::unlink(tmp.c_str());
    return Status::error(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  }
  // Streams tensor data after the header, so a large model is not copied twice in memory.
  std::vector<uint8_t> header = header_bytes();
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  static const uint8_t kZeros[256] = {};
  for (const auto& t : tensors_) {
    if (!ok) break;
    ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    size_t pad = (alignment_ - t.data.size() % alignment_) % alignment_;
    ok = ok && std::fwrite(kZeros, 1, pad, f) == pad;
  }
  ok = ok && std::fflush(f) == 0;
  int err = ok ? 0 : errno;
  // Checked while it has no name (through its descriptor): a signal while `verify` loads it back,
  // which takes a while for a large model, leaves nothing behind either.
  const std::string fd_path = fmt::format("/proc/self/fd/{}", ::fileno(f));
  if (ok && verify) {
    if (Status s = verify(anonymous ? fd_path : tmp); !s) {
      std::fclose(f);
      if (!tmp.empty()) ::unlink(tmp.c_str());
      return s;
    }
  }
  if (ok && replacing) {
    // The file it replaces keeps its owner (where this process may give it, as root may) and
    // mode: set after the check, which reads it (a mode without read permission, 0200, is kept).
    [[maybe_unused]] const int owned = ::fchown(::fileno(f), st.st_uid, st.st_gid);
    ::fchmod(::fileno(f), st.st_mode & 07777);
  }
  // From its first name to its last, signals wait in this thread (thread pools' workers block
  // them, common/thread_pool.cc): the process ends with PATH as it was or replaced whole, and no
  // temporary name; only SIGKILL, which nothing can hold off, can land between the two.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before);
  if (ok && anonymous) {
    // Named under a unique temporary name first (linkat cannot replace), then renamed over.
    for (int attempt = 0; attempt < 100 && tmp.empty(); ++attempt) {
      const std::string name = fmt::format("{}.partial-{}-{}", path, ::getpid(), attempt);
      if (::linkat(AT_FDCWD, fd_path.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) tmp = name;
      else if (errno != EEXIST) break;
    }
    if (tmp.empty()) ok = false, err = errno;
  }
  if (std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
  if (!ok && !tmp.empty()) ::unlink(tmp.c_str());
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (!ok) return Status::error(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  return Status::ok();
}

}  // namespace sluice::gguf
