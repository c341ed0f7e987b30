// The request fuzz target on its seeds (which must get through every parser, or the fuzzer
// would start from nothing) and on thousands of deterministic mutations of them, in every
// test run and under ASan in CI: byte mutations, and structure-aware ones that put an edge
// value of fuzz/request.dict (range edges, huge exponents, invalid UTF-8, ...) or a wide,
// long or deep value in place of a JSON value. `make fuzz-request` runs it coverage-guided
// with libFuzzer and the same dictionary.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/test_paths.h"
#include "fuzz/request_fuzz.h"

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Seeds: whole HTTP requests (.http) and bodies alone (.json).
std::vector<std::string> seeds(const std::string& extension) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(sluice::testing::source_dir() + "/fuzz/request_seeds")) {
    if (e.path().extension() == extension) out.push_back(read(e.path()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The values of a libFuzzer dictionary: lines name="value" with \xNN, \\ and \" escapes.
std::vector<std::string> dictionary() {
  std::vector<std::string> out;
  std::istringstream in(read(sluice::testing::source_dir() + "/fuzz/request.dict"));
  for (std::string line; std::getline(in, line);) {
    const size_t open = line.find('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos) continue;
    std::string v;
    for (size_t i = open + 1; i + 1 < line.size(); ++i) {
      if (line[i] != '\\') {
        v += line[i];
      } else if (line[i + 1] == 'x') {
        v += static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16));
        i += 3;
      } else {
        v += line[++i];
      }
    }
    out.push_back(v);
  }
  return out;
}

int run(const std::string& s) { return sluice_fuzz_request(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
int run_body(const std::string& s) { return sluice_fuzz_body(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

std::string http_post(const std::string& body) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// Where each JSON value in `s` starts and ends (strings, numbers, literals, containers),
// found by a scanner that only needs the text to be roughly JSON.
std::vector<std::pair<size_t, size_t>> value_spans(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> spans;
  std::vector<size_t> open;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
      // A key (followed by ':') is not a value.
      size_t k = j + 1;
      while (k < s.size() && s[k] == ' ') ++k;
      if (k >= s.size() || s[k] != ':') spans.emplace_back(i, std::min(j + 1, s.size()));
      i = j;
    } else if (c == '{' || c == '[') {
      open.push_back(i);
    } else if ((c == '}' || c == ']') && !open.empty()) {
      spans.emplace_back(open.back(), i + 1);
      open.pop_back();
    } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
      size_t j = i;
      while (j < s.size() && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ') ++j;
      spans.emplace_back(i, j);
      i = j - 1;
    }
  }
  return spans;
}

// A value a hand-written seed would not have: wide, long, deep or repetitive.
std::string generated_value(std::mt19937& rng) {
  switch (rng() % 5) {
    case 0: {  // an object with many keys (nlohmann's ordered_json::parse is quadratic in them)
      std::string o = "{";
      for (int k = 0, n = 1000 + static_cast<int>(rng() % 3000); k < n; ++k) o += (k ? ",\"k" : "\"k") + std::to_string(k) + "\":1";
      return o + "}";
    }
    case 1: return "\"" + std::string(1000 + rng() % 100000, 'a') + "\"";
    case 2: return std::string(60 + rng() % 10, '[') + std::string(60 + rng() % 10, ']');
    case 3: return "1" + std::string(300 + rng() % 400, '0');
    default: {
      std::string a = "[";
      for (int k = 0, n = 1000 + static_cast<int>(rng() % 5000); k < n; ++k) a += k ? ",7" : "7";
      return a + "]";
    }
  }
}

TEST(RequestFuzzTest, SeedsReachEveryParser) {
  ASSERT_GE(seeds(".http").size(), 4u);
  for (const auto& s : seeds(".http")) EXPECT_EQ(run(s), 2) << s;
  ASSERT_GE(seeds(".json").size(), 2u);
  for (const auto& s : seeds(".json")) EXPECT_EQ(run_body(s), 1) << s;
  EXPECT_GE(dictionary().size(), 40u);
}

// Each body seed with one, two or three of its values replaced by an edge value, alone and
// framed as HTTP. Whatever the result, it must be a value or an error.
TEST(RequestFuzzTest, StructureAwareMutations) {
  const auto bodies = seeds(".json");
  const auto edges = dictionary();
  std::mt19937 rng(99);
  int refused = 0, through = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = bodies[i % bodies.size()];
    for (int k = 0, edits = 1 + static_cast<int>(rng() % 3); k < edits; ++k) {
      const auto spans = value_spans(s);
      if (spans.empty()) break;
      const auto [begin, end] = spans[rng() % spans.size()];
      s.replace(begin, end - begin, rng() % 8 == 0 ? generated_value(rng) : edges[rng() % edges.size()]);
    }
    const int r = run_body(s);
    (r == 1 ? through : refused) += 1;
    EXPECT_EQ(run(http_post(s)), 1 + r);
  }
  // Both outcomes are common: the edits reach the field checks and the JSON parser's limits.
  EXPECT_GT(through, 300);
  EXPECT_GT(refused, 300);
}

TEST(RequestFuzzTest, Mutations) {
  const auto all = seeds(".http");
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
