#include "tokenizer/synthetic_vocab.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/check.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

namespace sluice {
namespace {

// A small English sample to learn the first merges from, so that common words encode to
// few tokens, as they would with a trained vocabulary.
constexpr std::string_view kCorpus =
    "The river runs through the valley, and the sluice gates hold the water back until "
    "the fields need it. In the morning the keeper opens the first gate; by noon the water "
    "has reached the lower fields, and by evening the channels are full. She writes down "
    "what she sees: the level of the water, the time each gate was opened, and the weather. "
    "It is a simple job, but it has to be done every day, and it has to be done right.\n"
    "When the rain comes, the work changes. The keeper watches the river rise and decides "
    "which gates to close and which to open, so that the water goes where it can do no harm. "
    "Once, years ago, a storm broke the upper gate, and the village learned how much it "
    "depended on that one piece of wood and iron. They built a new gate of stone and steel, "
    "and they wrote the story down so that nobody would forget it.\n"
    "A language model is not so different. Requests arrive like water: some are small, some "
    "are large, and they do not wait for each other. The server has to decide which ones to "
    "run together, how much memory each one may use, and what to do when there is not enough "
    "for all of them. If it makes the wrong choice, users wait; if it makes the right one, "
    "they never notice that a choice was made at all.\n"
    "Hello, world! How are you today? I am fine, thank you. What would you like to know? "
    "Please tell me more about the weather, the time, and the number of people in the room. "
    "There were 12 people at 3 o'clock, 25 at 4, and 100 by the end of the day. "
    "We've said it before and we'll say it again: they're here, it's late, and I'd rather "
    "go home.\n"
    "def main():\n    for i in range(10):\n        print(i)\n    return 0\n"
    "int main() { return 0; }\n"
    "The quick brown fox jumps over the lazy dog. This is a test of the system. "
    "Information, question, answer, because, between, through, without, something, "
    "important, different, following, another, example, government, generation, tokens.\n";

// Letters a fill merge may append: lowercase letters and the space (byte-level 'Ġ').
constexpr std::string_view kFillBytes = "etaoinshrdlcumwfgypbvkjxqz ";
constexpr size_t kMaxFillTokenBytes = 12;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct VocabBuilder {
  std::vector<std::string> tokens;   // raw bytes of each token
  std::vector<std::string> merges;   // byte-level "left right"
  std::unordered_map<std::string, int32_t> ids;  // token bytes -> id

  int32_t add_token(std::string text) {
    const auto id = static_cast<int32_t>(tokens.size());
    ids.emplace(text, id);
    tokens.push_back(std::move(text));
    return id;
  }
  // Records the merge "left right"; its result becomes a new token unless it is one already
  // (plain BPE can reach one string by two different pairs).
  int32_t add_merge(int32_t left, int32_t right) {
    merges.push_back(bytes_to_byte_level(tokens[left]) + " " + bytes_to_byte_level(tokens[right]));
    std::string text = tokens[left] + tokens[right];
    auto it = ids.find(text);
    return it != ids.end() ? it->second : add_token(std::move(text));
  }
};

// Plain BPE training: repeatedly merge the most frequent adjacent pair (ties: lowest ids).
void learn_merges(VocabBuilder& b, size_t target_tokens) {
  auto pretokenizer = PreTokenizer::create("qwen2");
  SLUICE_CHECK(pretokenizer.has_value()) << pretokenizer.error().message();
  auto words_or = pretokenizer->split(kCorpus);
  SLUICE_CHECK(words_or.has_value()) << words_or.error().message();
  std::map<std::string_view, int64_t> counts;
  for (std::string_view w : *words_or) ++counts[w];

  struct Word {
    std::vector<int32_t> ids;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [text, count] : counts) {
    Word w{{}, count};
    for (char c : text) w.ids.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  auto key = [](int32_t l, int32_t r) { return (static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r); };
  while (b.tokens.size() < target_tokens) {
    std::unordered_map<uint64_t, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.ids.size(); ++i) pair_counts[key(w.ids[i], w.ids[i + 1])] += w.count;
    }
    uint64_t best_key = 0;
    int64_t best_count = 0;
    for (const auto& [k, c] : pair_counts) {
      if (c > best_count || (c == best_count && k < best_key)) {
        best_key = k;
        best_count = c;
      }
    }
    if (best_count < 2) break;
    const auto left = static_cast<int32_t>(best_key >> 32);
    const auto right = static_cast<int32_t>(best_key & 0xFFFFFFFF);
    const int32_t merged = b.add_merge(left, right);
    for (Word& w : words) {
      std::vector<int32_t> next;
      next.reserve(w.ids.size());
      for (size_t i = 0; i < w.ids.size(); ++i) {
        if (i + 1 < w.ids.size() && w.ids[i] == left && w.ids[i + 1] == right) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(w.ids[i]);
        }
      }
      w.ids.swap(next);
    }
  }
}

// Deterministic fill: extend a random existing token by one letter or a space, skipping
// results that exist already or grow too long.
void fill_merges(VocabBuilder& b, size_t target_tokens, uint64_t seed) {
  std::vector<int32_t> fill_byte_ids;
  for (char c : kFillBytes) fill_byte_ids.push_back(static_cast<uint8_t>(c));
  uint64_t state = seed;
  while (b.tokens.size() < target_tokens) {
    const auto left = static_cast<int32_t>(splitmix64(state) % b.tokens.size());
    const int32_t right = fill_byte_ids[splitmix64(state) % fill_byte_ids.size()];
    const std::string& l = b.tokens[left];
    if (l.size() + 1 > kMaxFillTokenBytes) continue;
    if (b.ids.contains(l + b.tokens[right])) continue;
    b.add_merge(left, right);
  }
}

}  // namespace

void write_synthetic_bpe_vocab(gguf::Writer& w, int32_t vocab_size, uint64_t seed) {
  SLUICE_CHECK(vocab_size >= kSyntheticMinVocabSize)
      << "vocab_size " << vocab_size << " < " << kSyntheticMinVocabSize;
  const auto num_normal = static_cast<size_t>(vocab_size - kSyntheticNumSpecialTokens);

  VocabBuilder b;
  b.tokens.reserve(vocab_size);
  b.merges.reserve(num_normal - 256);
  b.ids.reserve(vocab_size);
  for (int byte = 0; byte < 256; ++byte) b.add_token(std::string(1, static_cast<char>(byte)));
  learn_merges(b, num_normal);
  fill_merges(b, num_normal, seed);

  std::vector<std::string> texts;
  texts.reserve(vocab_size);
  for (const std::string& t : b.tokens) texts.push_back(bytes_to_byte_level(t));
  std::vector<int32_t> types(texts.size(), 1);  // normal
  const int32_t endoftext_id = static_cast<int32_t>(texts.size());
  for (std::string_view special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    texts.emplace_back(special);
    types.push_back(3);  // control
  }
  const int32_t im_end_id = endoftext_id + 2;

  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", texts);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", b.merges);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(endoftext_id));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(endoftext_id));
  w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(endoftext_id));
  w.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(im_end_id));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
}

}  // namespace sluice
