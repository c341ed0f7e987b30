// The model a benchmark runs: a GGUF file, or a preset shape made in memory (random weights).
#pragma once

#include <cstdio>
#include <string>

#include "model/loader.h"
#include "model/model_maker.h"

namespace sluice::bench {

// Exits with a message on error (benchmarks are command-line tools). `description` names what
// was loaded.
inline LoadedModel load_bench_model(const std::string& path, const std::string& preset, const std::string& dtype,
                                    std::string& description) {
  LoadedModel m;
  if (!path.empty()) {
    auto loaded = load_model(path);
    if (!loaded) std::fprintf(stderr, "%s\n", loaded.error().message().c_str()), std::exit(1);
    description = path;
    return std::move(*loaded);
  }
  auto spec = preset_spec(preset);
  if (!spec) std::fprintf(stderr, "%s\n", spec.error().message().c_str()), std::exit(1);
  if (dtype == "f32") spec->dtype = gguf::TensorType::kF32;
  else if (dtype == "f16") spec->dtype = gguf::TensorType::kF16;
  else if (dtype == "bf16") spec->dtype = gguf::TensorType::kBF16;
  else if (dtype == "q8_0") spec->dtype = gguf::TensorType::kQ8_0;
  else std::fprintf(stderr, "unknown --dtype '%s' (f32, f16, bf16, q8_0)\n", dtype.c_str()), std::exit(1);
  std::fprintf(stderr, "making %s %s in memory...\n", preset.c_str(), dtype.c_str());
  auto w = make_model(*spec);
  if (!w) std::fprintf(stderr, "%s\n", w.error().message().c_str()), std::exit(1);
  auto f = gguf::File::from_buffer(w->to_bytes(), preset);
  m.tokenizer = std::move(*Tokenizer::from_gguf(**f));
  m.model = std::move(*Model::load(std::move(*f)));
  description = preset + " " + dtype + " (random weights)";
  return m;
}

}  // namespace sluice::bench
