// Conformance: every vector of SLUICE_SHARED_DIR/tokenizer/NAME.gguf.{inp,out} must encode
// exactly (no BOS, special tokens not parsed), and decode back to its input.
//
//   NAME.gguf.inp: "text1\n__ggml_vocab_test__\ntext2\n__ggml_vocab_test__\n..."
//   NAME.gguf.out: one line per text, ids separated by spaces (" 474 287 29871")
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tokenizer/test_vocab.h"

namespace sluice {
namespace {

constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t hit = text.find(kSeparator, pos);
    if (hit == std::string_view::npos) break;  // what follows the last separator is not a test
    out.emplace_back(text.substr(pos, hit - pos));
    pos = hit + kSeparator.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> parse_outputs(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    int32_t id;
    while (ids >> id) row.push_back(id);
    out.push_back(std::move(row));
  }
  return out;
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, EncodesEveryVectorExactlyAndDecodesItBack) {
  const std::string base = fmt::format("{}/{}.gguf", testing::shared_tokenizer_dir(), GetParam());
  if (!std::filesystem::exists(base + ".inp")) {
    GTEST_SKIP() << "conformance data not found: " << base << ".inp (SLUICE_SHARED_DIR absent?)";
  }
  const Tokenizer* tok = testing::shared_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr) << base << " missing";
  const std::vector<std::string> inputs = split_inputs(read_file(base + ".inp"));
  const std::vector<std::vector<int32_t>> expected = parse_outputs(read_file(base + ".out"));
  ASSERT_GT(inputs.size(), 10u);
  ASSERT_EQ(inputs.size(), expected.size());

  int num_passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tok->encode(inputs[i], {.add_bos = false, .parse_special = false});
    ASSERT_TRUE(ids.has_value()) << ids.error().message();
    EXPECT_EQ(*ids, expected[i]) << "vector " << i << ": " << ::testing::PrintToString(inputs[i]);
    EXPECT_EQ(tok->decode(expected[i]), inputs[i]) << "vector " << i;
    num_passed += *ids == expected[i];
  }
  EXPECT_EQ(num_passed, static_cast<int>(inputs.size()));
}

INSTANTIATE_TEST_SUITE_P(SharedVocabularies, Conformance,
                         ::testing::Values("ggml-vocab-llama-spm", "ggml-vocab-gpt-2", "ggml-vocab-qwen2"),
                         [](const auto& info) {
                           std::string name = info.param.substr(std::string("ggml-vocab-").size());
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace sluice
