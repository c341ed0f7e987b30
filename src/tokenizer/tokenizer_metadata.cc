#include "tokenizer/tokenizer_metadata.h"

#include <string>

namespace sluice {

void copy_tokenizer_metadata(const gguf::File& src, gguf::Writer& w) {
  for (const auto& [key, value] : src.metadata()) {
    if (key.starts_with("tokenizer.")) w.set(std::string(key), gguf::to_owned(value));
  }
}

}  // namespace sluice
