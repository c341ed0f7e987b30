// `sluice model quantize`: a GGUF model of float weights (F32, F16, BF16) rewritten with
// quantized matrices, in the per-tensor type mixes users know from llama.cpp's llama-quantize
// (Q4_K_M, ...). The mixes follow llama.cpp's choice of type per tensor (src/llama-quant.cpp,
// llama_tensor_get_type, at commit c392e50) for the architectures sluice loads; no importance
// matrix (--imatrix is out of scope).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace sluice {

struct QuantMix {
  std::string_view name;        // as the command takes it: "q4_k_m"
  uint32_t file_type;           // general.file_type (llama.cpp's llama_ftype)
  gguf::TensorType base;        // the type of most matrices
  std::string_view description;
};

const std::vector<QuantMix>& quant_mixes();
Result<const QuantMix*> find_quant_mix(std::string_view name);

struct QuantizeReport {
  std::map<gguf::TensorType, std::pair<int, uint64_t>> by_type;  // tensors and bytes per type
  // Tensors whose rows the chosen type cannot hold, with the type used instead.
  std::vector<std::string> fallbacks;
  uint64_t input_bytes = 0, output_bytes = 0;  // of the tensors
};

// The type llama.cpp's mix gives each tensor of `in`, in file order (before any fallback).
// Exposed for tests.
std::vector<std::pair<std::string, gguf::TensorType>> planned_types(const gguf::File& in, const QuantMix& mix);

// `in` quantized to `mix` into `out` (metadata and tensors), as quantize_model writes it.
Result<QuantizeReport> quantize_into(const gguf::File& in, const QuantMix& mix, gguf::Writer& out, ThreadPool& pool,
                                     const std::function<void(uint64_t, uint64_t)>& progress = {});

// Writes `in` quantized to `mix` at out_path (atomically; `verify` checks the file before it
// replaces anything: gguf::Writer::write_file). progress(done, total) counts elements. Errors
// for a tensor of a quantized type in the input, a weight that is not finite, a write failure,
// or what `verify` says.
Result<QuantizeReport> quantize_model(const gguf::File& in, const QuantMix& mix, const std::string& out_path,
                                      ThreadPool& pool, const std::function<void(uint64_t, uint64_t)>& progress = {},
                                      const gguf::Writer::Verify& verify = {});

}  // namespace sluice
