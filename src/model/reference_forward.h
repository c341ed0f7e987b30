// A naive reference forward pass for tests: scalar, double accumulation, contiguous KV,
// written independently of the kernels (its own dequantization, rope, attention).
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf_reader.h"
#include "model/config.h"

namespace sluice::testing {

// Logits [num_tokens][vocab] for a single sequence of tokens at positions 0..n-1.
std::vector<std::vector<double>> reference_logits(const gguf::File& file, const std::vector<int32_t>& tokens);

}  // namespace sluice::testing
