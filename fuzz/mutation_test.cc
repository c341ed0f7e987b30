// Runs the fuzz target on thousands of deterministic mutations of small valid models (bit
// flips, byte overwrites with boundary values, truncations, corrupted length fields). Not
// coverage-guided like `make fuzz`, but part of every test run, and under ASan in CI.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "model/model_maker.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace sluice {
namespace {

std::vector<uint8_t> seed_model(Arch arch, gguf::TensorType dtype) {
  ModelSpec s = *preset_spec("tiny");
  s.arch = arch;
  s.dtype = dtype;
  s.num_layers = 1;
  s.dim = 32;
  s.ffn_dim = 32;
  s.num_heads = 2;
  s.num_kv_heads = 1;
  s.vocab_size = 300;
  return make_model(s)->to_bytes();
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  std::vector<uint8_t> mutate(const std::vector<uint8_t>& in, size_t header_end) {
    std::vector<uint8_t> out = in;
    // Most of a model is tensor data; aim most mutations at the header, where parsing happens.
    auto pos = [&] { return next() % 4 ? next() % header_end : next() % out.size(); };
    switch (next() % 5) {
      case 0: out[pos()] ^= static_cast<uint8_t>(1u << (next() % 8)); break;
      case 1: {
        static const uint8_t kValues[] = {0, 1, 0x7f, 0x80, 0xfe, 0xff};
        out[pos()] = kValues[next() % 6];
        break;
      }
      case 2: out.resize(next() % out.size()); break;
      case 3: {  // a huge or small 64-bit length at a random place
        const size_t p = pos();
        if (p + 8 <= out.size()) {
          uint64_t v = next() % 2 ? ~uint64_t{0} >> (next() % 64) : next() % 300;
          std::memcpy(&out[p], &v, 8);
        }
        break;
      }
      default:
        for (int i = 0; i < 4; ++i) out[pos()] = static_cast<uint8_t>(next());
    }
    return out;
  }

 private:
  uint64_t state_;
};

TEST(GgufFuzz, MutatedModelsNeverCrash) {
  const std::vector<std::vector<uint8_t>> seeds = {seed_model(Arch::kLlama, gguf::TensorType::kF32),
                                                   seed_model(Arch::kQwen2, gguf::TensorType::kQ8_0),
                                                   seed_model(Arch::kQwen3, gguf::TensorType::kBF16)};
  Mutator m(12345);
  int runs = 0;
  for (int i = 0; i < 3000; ++i) {
    const auto& seed = seeds[i % seeds.size()];
    // The header (metadata + tensor infos) ends where the data starts; the tokenizer is most of it.
    auto input = m.mutate(seed, seed.size() / 3);
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++runs;
  }
  EXPECT_EQ(runs, 3000);
}

}  // namespace
}  // namespace sluice
