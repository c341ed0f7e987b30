#include "cli/engine_options.h"

#include <gtest/gtest.h>

namespace sluice::cli {
namespace {

TEST(ParseMemorySize, AcceptsBytesUnitsAndFractions) {
  const int64_t avail = 10'000'000'000;
  EXPECT_EQ(*parse_memory_size("4096", avail), 4096);
  EXPECT_EQ(*parse_memory_size("512MiB", avail), 512ll << 20);
  EXPECT_EQ(*parse_memory_size("512m", avail), 512ll << 20);
  EXPECT_EQ(*parse_memory_size("2G", avail), 2ll << 30);
  EXPECT_EQ(*parse_memory_size("1.5GB", avail), 1'500'000'000);
  EXPECT_EQ(*parse_memory_size("3KB", avail), 3000);
  EXPECT_EQ(*parse_memory_size("0.4", avail), 4'000'000'000);
  EXPECT_EQ(*parse_memory_size("1.0", avail), avail);
}

TEST(ParseMemorySize, RefusesWhatItCannotRead) {
  for (const char* bad : {"", "lots", "-1", "2X", "2GiBs", "1e9", "5..1", "G"}) {
    auto r = parse_memory_size(bad, 1000);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("--kv-cache-memory must be"), std::string::npos) << bad;
  }
  // A number with a point is a fraction: one out of its range says what a fraction may be.
  for (const char* bad : {"1.5", "0.0"}) {
    auto r = parse_memory_size(bad, 1000);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error().message().find("a fraction of available memory is above 0 and at most 1.0"), std::string::npos)
        << r.error().message();
  }
  EXPECT_FALSE(parse_memory_size("0.5", 0));  // fraction of an unknown amount
  // The draft's flag says its own name (it said --kv-cache-memory).
  auto draft = parse_memory_size("0.0", 1000, "--draft-kv-cache-memory");
  ASSERT_FALSE(draft);
  EXPECT_EQ(draft.error().message().rfind("--draft-kv-cache-memory 0.0: a fraction", 0), 0u) << draft.error().message();
}

}  // namespace
}  // namespace sluice::cli
