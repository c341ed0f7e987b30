// Copying a model's tokenizer into another GGUF file (`sluice model make --vocab FILE`).
//
// Pure function; thread-safe.
#pragma once

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace sluice {

// Copies every "tokenizer.*" metadata key of `src` into `w` (tokenizer.ggml.* and also
// tokenizer.chat_template), values and types unchanged; keys already in `w` are replaced.
void copy_tokenizer_metadata(const gguf::File& src, gguf::Writer& w);

}  // namespace sluice
