// The model a benchmark runs: a GGUF file, or a preset shape made in memory (random weights).
#pragma once

#include <cstdio>
#include <map>
#include <string>

#include "model/loader.h"
#include "model/model_maker.h"
#include "model/quantize_model.h"

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
  // A type makes every matrix of that type; a mix (q4_k_m, ...) makes F32 weights and
  // quantizes them as `sluice model quantize` does.
  const auto type = gguf::tensor_type_from_name(dtype);
  auto mix = find_quant_mix(dtype);
  if (!type && !mix) {
    std::fprintf(stderr, "unknown --dtype '%s': a tensor type (f32, f16, bf16, q8_0, q4_k, ...) or a mix: %s\n",
                 dtype.c_str(), mix.error().message().c_str());
    std::exit(1);
  }
  spec->dtype = type ? *type : gguf::TensorType::kF32;
  std::fprintf(stderr, "making %s %s in memory...\n", preset.c_str(), dtype.c_str());
  auto w = make_model(*spec);
  if (!w) std::fprintf(stderr, "%s\n", w.error().message().c_str()), std::exit(1);
  auto f = gguf::File::from_buffer(w->to_bytes(), preset);
  if (!type) {
    ThreadPool pool(0);
    gguf::Writer q;
    auto report = quantize_into(**f, **mix, q, pool);
    if (!report) std::fprintf(stderr, "%s\n", report.error().message().c_str()), std::exit(1);
    // One line per kind ("Q4_K cannot hold rows of 896; Q5_0 instead": 120 tensors), not per
    // tensor: `sluice model quantize` names each.
    std::map<std::string, int> kinds;
    for (const std::string& fb : report->fallbacks) ++kinds[fb.substr(fb.find(": ") + 2)];
    for (const auto& [kind, n] : kinds) std::fprintf(stderr, "fallback: %s (%d tensors)\n", kind.c_str(), n);
    f = gguf::File::from_buffer(q.to_bytes(), preset);
  }
  m.tokenizer = std::move(*Tokenizer::from_gguf(**f));
  m.model = std::move(*Model::load(std::move(*f)));
  description = preset + " " + dtype + " (random weights)";
  return m;
}

}  // namespace sluice::bench
