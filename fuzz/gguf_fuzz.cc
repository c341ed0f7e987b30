// Fuzz target: any byte string given to the GGUF reader, then to the model and tokenizer
// loaders, yields a value or an error — never a crash, a hang or an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/gguf_reader.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  auto file = gguf::File::from_buffer(std::vector<uint8_t>(data, data + size), "fuzz");
  if (!file) return 0;
  for (const auto& [key, value] : (*file)->metadata()) (void)value.to_string();
  if (auto tok = Tokenizer::from_gguf(**file)) {
    auto ids = (*tok)->encode("Hello world, 123 ünïcödé 🙂", {.add_bos = true, .parse_special = true});
    if (ids) (void)(*tok)->decode(*ids);
  }
  (void)Model::load(std::move(*file));
  return 0;
}
