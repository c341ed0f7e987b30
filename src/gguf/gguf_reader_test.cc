#include "gguf/gguf_reader.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "gguf/gguf_writer.h"

namespace sluice::gguf {
namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A small file with every value type, a nested array and two tensors.
std::vector<uint8_t> sample_file() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set("u8", {.type = ValueType::kU8, .u64 = 200});
  w.set("i8", {.type = ValueType::kI8, .i64 = -100});
  w.set("u16", {.type = ValueType::kU16, .u64 = 60000});
  w.set("i16", {.type = ValueType::kI16, .i64 = -30000});
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set("u64", OwnedValue::u64v(1ull << 60));
  w.set("i64", {.type = ValueType::kI64, .i64 = -(1ll << 60)});
  w.set_f32("f32", 0.5f);
  w.set("f64", {.type = ValueType::kF64, .f64 = 0.25});
  w.set_bool("flag", true);
  w.set_string_array("strings", {"a", "bc", ""});
  w.set_i32_array("ints", {1, -2, 3});
  w.set("nested", OwnedValue::array(ValueType::kArray,
                                    {OwnedValue::array(ValueType::kU32, {OwnedValue::u32(7)}),
                                     OwnedValue::array(ValueType::kString, {OwnedValue::string("x")})}));
  w.add_tensor("a", TensorType::kF32, {4, 2}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.add_tensor("b", TensorType::kF32, {3}, f32_bytes({9, 10, 11}));
  return w.to_bytes();
}

TEST(GgufReader, ReadsEveryValueType) {
  auto file = File::from_buffer(sample_file(), "sample");
  ASSERT_TRUE(file) << file.error().message();
  const File& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("u8"), 200);
  EXPECT_EQ(*f.get_int("i8"), -100);
  EXPECT_EQ(*f.get_int("u16"), 60000);
  EXPECT_EQ(*f.get_int("i16"), -30000);
  EXPECT_EQ(*f.get_int("u32"), 4000000000ll);
  EXPECT_EQ(*f.get_int("i32"), -2000000000);
  EXPECT_EQ(*f.get_int("u64"), 1ll << 60);
  EXPECT_EQ(*f.get_int("i64"), -(1ll << 60));
  EXPECT_EQ(*f.get_float("f32"), 0.5);
  EXPECT_EQ(*f.get_float("f64"), 0.25);
  EXPECT_TRUE(*f.get_bool("flag"));
  auto strings = f.get_array("strings", ValueType::kString);
  ASSERT_TRUE(strings);
  EXPECT_EQ((*strings)->strings, (std::vector<std::string_view>{"a", "bc", ""}));
  auto ints = f.get_array("ints", ValueType::kI32);
  ASSERT_TRUE(ints);
  EXPECT_EQ((*ints)->int_at(1), -2);
  const Value* nested = f.find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].int_at(0), 7);
  EXPECT_EQ(nested->arrays[1].strings[0], "x");
  // Metadata keeps file order.
  EXPECT_EQ(f.metadata().front().first, "general.architecture");
}

TEST(GgufReader, TensorsAreAlignedZeroCopyViews) {
  auto file = File::from_buffer(sample_file(), "sample");
  ASSERT_TRUE(file);
  const TensorInfo* a = (*file)->find_tensor("a");
  const TensorInfo* b = (*file)->find_tensor("b");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->dims, (std::vector<uint64_t>{4, 2}));
  EXPECT_EQ(a->rows(), 2u);
  EXPECT_EQ(a->num_bytes, 32u);
  EXPECT_EQ(b->offset % 32, 0u);
  float v;
  std::memcpy(&v, b->data + 8, 4);
  EXPECT_EQ(v, 11.0f);
}

TEST(GgufReader, WrongTypeAndMissingKeysNameTheKey) {
  auto file = File::from_buffer(sample_file(), "sample");
  ASSERT_TRUE(file);
  auto s = (*file)->get_int("general.architecture");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("general.architecture"), std::string::npos);
  auto m = (*file)->get_string("nope");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message().find("missing metadata key 'nope'"), std::string::npos);
  EXPECT_EQ(*(*file)->get_int_or("nope", 5), 5);
}

std::string parse_error(std::vector<uint8_t> bytes) {
  auto file = File::from_buffer(std::move(bytes), "bad.gguf");
  return file ? std::string("no error") : file.error().message();
}

TEST(GgufReader, ReadsVersion2) {
  auto bytes = sample_file();
  bytes[4] = 2;  // v2 and v3 share the little-endian layout
  auto file = File::from_buffer(std::move(bytes), "v2");
  ASSERT_TRUE(file) << file.error().message();
  EXPECT_EQ((*file)->version(), 2u);
  EXPECT_EQ((*file)->tensors().size(), 2u);
}

TEST(GgufReader, RejectsBadMagicAndVersion) {
  auto bytes = sample_file();
  bytes[0] = 'X';
  EXPECT_NE(parse_error(bytes).find("not a GGUF file"), std::string::npos);
  bytes = sample_file();
  bytes[4] = 7;
  EXPECT_NE(parse_error(bytes).find("unsupported GGUF version 7"), std::string::npos);
  EXPECT_NE(parse_error({}).find("truncated"), std::string::npos);
}

TEST(GgufReader, EveryTruncationIsAnErrorNeverACrash) {
  auto bytes = sample_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    auto file = File::from_buffer(std::move(cut), "cut.gguf");
    // The last tensor's padding is not data, so only a cut inside real bytes must fail.
    if (n < bytes.size() - 20) {
      EXPECT_FALSE(file) << "cut at " << n;
    }
  }
}

TEST(GgufReader, BigEndianFilesAndHugeIntegersAreNamed) {
  auto bytes = sample_file();
  const uint32_t swapped = 0x03000000;  // version 3 written big-endian
  std::memcpy(bytes.data() + 4, &swapped, 4);
  const std::string err = parse_error(bytes);
  EXPECT_NE(err.find("a big-endian GGUF file (version 3 with its bytes swapped)"), std::string::npos) << err;
  Writer w;
  w.set("big", OwnedValue::u64v(18446744073709551615ull));
  auto file = File::from_buffer(w.to_bytes(), "big.gguf");
  ASSERT_TRUE(file) << file.error().message();
  auto v = (*file)->get_int("big");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().message(), "metadata 'big' is 18446744073709551615, past the largest integer sluice reads "
                                 "(9223372036854775807)");
}

TEST(GgufReader, ImpossibleCountsAreRejectedBeforeAllocating) {
  auto bytes = sample_file();
  uint64_t huge = 1ull << 62;
  std::memcpy(bytes.data() + 16, &huge, 8);  // metadata count
  EXPECT_NE(parse_error(bytes).find("metadata count"), std::string::npos);
  bytes = sample_file();
  std::memcpy(bytes.data() + 8, &huge, 8);  // tensor count
  EXPECT_NE(parse_error(bytes).find("tensor count"), std::string::npos);
}

// A file of empty arrays nested in an array: 12 bytes each on disk, far more each in memory.
TEST(GgufReader, NestedArraysPastTheCapAreRefusedBeforeAllocating) {
  auto file_with = [](uint64_t n) {
    std::vector<uint8_t> b;
    auto put = [&b](const auto& v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      b.insert(b.end(), p, p + sizeof(v));
    };
    put(uint32_t{0x46554747});  // "GGUF"
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(uint64_t{1});  // metadata
    put(uint64_t{4});
    b.insert(b.end(), {'d', 'e', 'e', 'p'});
    put(static_cast<uint32_t>(ValueType::kArray));
    put(static_cast<uint32_t>(ValueType::kArray));
    put(n);
    for (uint64_t i = 0; i < n; ++i) {
      put(static_cast<uint32_t>(ValueType::kU32));
      put(uint64_t{0});
    }
    return b;
  };
  auto small = File::from_buffer(file_with(1000), "small.gguf");
  ASSERT_TRUE(small) << small.error().message();
  std::string err = parse_error(file_with(300000));
  EXPECT_NE(err.find("nests more than 262144 arrays in arrays"), std::string::npos) << err;
}

// general.alignment says what is wrong with it: not an integer, not a power of two, or a power of
// two past what sluice reads (2^31 was called "not a power of two").
TEST(GgufReader, ABadAlignmentSaysWhatIsWrong) {
  const std::pair<OwnedValue, const char*> cases[] = {
      {OwnedValue::u32(48), "general.alignment is 48, not a power of two"},
      {OwnedValue::u32(0), "general.alignment is 0, not a power of two"},
      {OwnedValue::u32(1u << 31), "general.alignment is 2147483648, more than the 2^30 sluice reads"},
      {OwnedValue::u64v(1ull << 63), "general.alignment is 9223372036854775808, more than the 2^30 sluice reads"},
      {OwnedValue::string("64"), "not an integer"},
  };
  for (const auto& [value, says] : cases) {
    Writer w;
    w.set_string("general.architecture", "llama");
    w.set("general.alignment", value);
    w.add_tensor("a", TensorType::kF32, {2}, f32_bytes({1, 2}));
    auto f = File::from_buffer(w.to_bytes(), "aligned");
    ASSERT_FALSE(f) << says;
    EXPECT_NE(f.error().message().find(says), std::string::npos) << f.error().message();
  }
}

TEST(GgufReader, TensorDataPastEndIsNamed) {
  Writer w;
  w.add_tensor("blk.3.attn_q.weight", TensorType::kF32, {64}, f32_bytes(std::vector<float>(64, 1.0f)));
  auto bytes = w.to_bytes();
  bytes.erase(bytes.end() - 100, bytes.end());  // (resize(size - 100) trips GCC 12's -Wstringop-overflow under ASan)
  std::string err = parse_error(bytes);
  EXPECT_NE(err.find("tensor 'blk.3.attn_q.weight': data ends at"), std::string::npos) << err;
  // An offset near 2^64 (an aligned one): named as an offset, not as an end that wrapped around.
  bytes = w.to_bytes();
  const std::string name = "blk.3.attn_q.weight";
  const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end()) - bytes.begin();
  const uint64_t huge = ~uint64_t{0} - 31;  // n_dims (4 bytes), one dim (8), the type (4), then the offset
  std::memcpy(&bytes[at + name.size() + 4 + 8 + 4], &huge, 8);
  err = parse_error(bytes);
  EXPECT_NE(err.find("tensor 'blk.3.attn_q.weight': data offset 18446744073709551584 is past the end of the file"),
            std::string::npos)
      << err;
}

TEST(GgufReader, UnknownTensorTypeAndBadBlockMultiple) {
  Writer w;
  w.add_tensor("t", TensorType::kQ8_0, {32}, std::vector<uint8_t>(34));
  auto bytes = w.to_bytes();
  // Layout: 24-byte header, then name length (8) + "t" at 32, n_dims at 33, dim at 37, type at 45.
  size_t info = 32, type_at = 45;
  ASSERT_EQ(bytes[info], 't');
  uint32_t bad = 77;
  auto b2 = bytes;
  std::memcpy(b2.data() + type_at, &bad, 4);
  EXPECT_NE(parse_error(b2).find("unknown tensor type 77"), std::string::npos);
  uint64_t dim = 33;
  auto b3 = bytes;
  std::memcpy(b3.data() + info + 1 + 4, &dim, 8);
  EXPECT_NE(parse_error(b3).find("not a multiple of the block size 32"), std::string::npos);
}

// A corrupt name never reaches a message raw; dimensions too many elements together are named
// together, not by the one that happened to come last.
TEST(GgufReader, CorruptNamesAndDimensionProductsAreNamed) {
  Writer w;
  w.set_u32("ok.key", 1);
  w.add_tensor("t", TensorType::kF32, {4, 2}, f32_bytes(std::vector<float>(8, 1.0f)));
  const auto bytes = w.to_bytes();
  // Layout: 24-byte header, then the key's length (8) and "ok.key" at 32.
  ASSERT_EQ(bytes[32], 'o');
  auto control = bytes;
  control[33] = 0x01;
  EXPECT_NE(parse_error(control).find("key of metadata entry 0 at offset 24 is not text"), std::string::npos)
      << parse_error(control);
  auto invalid = bytes;
  invalid[33] = static_cast<uint8_t>(0xC3);  // a lead byte with no continuation
  EXPECT_NE(parse_error(invalid).find("is not text"), std::string::npos) << parse_error(invalid);
  // The tensor: after the key (6), its type (4) and u32 value (4): name length at 46, "t" at 54,
  // n_dims at 55, dims at 59 and 67.
  ASSERT_EQ(bytes[54], 't');
  auto product = bytes;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(product.data() + 59, &huge, 8);
  const uint64_t d1 = 512;
  std::memcpy(product.data() + 67, &d1, 8);
  EXPECT_NE(parse_error(product).find("tensor 't': dimensions 1099511627776, 512 make more than 2^48 elements"),
            std::string::npos)
      << parse_error(product);
}

TEST(GgufReader, OpenReportsMissingFile) {
  auto f = File::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message().find("/nonexistent/model.gguf"), std::string::npos);
}

// A FIFO (or a folder) is refused at once: opening a FIFO for reading used to wait for a
// writer forever, and `sluice model info`, `quantize` and `generate` hung.
TEST(GgufReader, AFifoOrAFolderIsRefusedWithoutWaiting) {
  const std::string fifo = ::testing::TempDir() + "sluice_fifo_" + std::to_string(::getpid()) + ".gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto f = File::open(fifo);
  ::unlink(fifo.c_str());
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message().find("is not a regular file"), std::string::npos) << f.error().message();
  auto d = File::open(::testing::TempDir());
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message().find("is not a regular file"), std::string::npos) << d.error().message();
}

TEST(GgufReader, OpensSharedModel) {
  std::string path = testing::shared_dir() + "/models/stories260K.gguf";
  auto f = File::open(path);
  if (!f && f.error().message().find("cannot open") != std::string::npos) GTEST_SKIP() << "no " << path;
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_EQ(*(*f)->get_string("general.architecture"), "llama");
  EXPECT_NE((*f)->find_tensor("token_embd.weight"), nullptr);
}

// The written file is checked while it has no name (a signal then leaves nothing behind); a
// check that fails leaves the old file as it was and no other.
TEST(GgufWriter, VerifiesTheFileBeforeItHasAName) {
  const std::string dir = ::testing::TempDir() + "/gguf_writer_verify";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/m.gguf";
  std::ofstream(path) << "old";
  Writer w;
  w.set_string("general.name", "new");
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
    return names;
  };
  // Without O_TMPFILE (some file systems) or /proc, the writer falls back to a named file.
  const int probe = ::open(dir.c_str(), O_TMPFILE | O_WRONLY, 0600);
  const bool unnamed = probe >= 0 && ::access("/proc/self/fd", X_OK) == 0;
  if (probe >= 0) ::close(probe);
  std::string seen;
  const Status failed = w.write_file(path, [&](const std::string& written) {
    auto f = File::open(written);
    if (f) seen = (*f)->get_string_or("general.name", "");
    if (unnamed) {
      EXPECT_EQ(entries(), std::vector<std::string>{"m.gguf"});  // only the old file has a name
    }
    return Status::error("refused");
  });
  EXPECT_EQ(failed.message(), "refused");
  EXPECT_EQ(seen, "new");
  EXPECT_EQ(entries(), std::vector<std::string>{"m.gguf"});
  std::ifstream old(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(old), {}), "old");
  ASSERT_TRUE(w.write_file(path, [](const std::string&) { return Status::ok(); }));
  EXPECT_EQ(entries(), std::vector<std::string>{"m.gguf"});
  auto f = File::open(path);
  ASSERT_TRUE(f) << f.error().message();
  EXPECT_EQ((*f)->get_string_or("general.name", ""), "new");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::gguf
