// The request fuzz target on its seeds (which must get through every parser, or the fuzzer
// would start from nothing) and on thousands of deterministic mutations of them, in every
// test run and under ASan in CI. `make fuzz-request` runs it coverage-guided with AFL++.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "fuzz/request_fuzz.h"

namespace {

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(sluice::testing::source_dir() + "/fuzz/request_seeds")) {
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

int run(const std::string& s) { return sluice_fuzz_request(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

TEST(RequestFuzzTest, SeedsReachEveryParser) {
  const auto all = seeds();
  ASSERT_GE(all.size(), 4u);
  for (const auto& s : all) EXPECT_EQ(run(s), 2) << s;
}

TEST(RequestFuzzTest, Mutations) {
  const auto all = seeds();
  std::mt19937 rng(42);
  int through = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s = all[i % all.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      const size_t pos = rng() % s.size();
      switch (rng() % 5) {
        case 0: s[pos] = static_cast<char>(rng() % 256); break;
        case 1: s.erase(pos, 1 + rng() % 16); break;
        case 2: s.insert(pos, std::string(1 + rng() % 4, "{[\"0:,\r\n"[rng() % 8])); break;
        case 3: s.resize(pos); break;
        default: s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 32)); break;
      }
    }
    through += run(s) == 2;
  }
  EXPECT_GT(through, 800);  // mutations that keep the framing reach the request parsers
}

}  // namespace
