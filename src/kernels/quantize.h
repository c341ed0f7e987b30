// Quantizing float rows into the block layouts of quant_blocks.h (for `sluice model quantize`
// and `sluice model make --dtype`).
//
// Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 are round-to-nearest and give the bytes ggml's reference
// quantizers give (ggml/src/ggml-quants.c, quantize_row_*_ref: the scale from the block's
// largest-magnitude value or its range, values times the inverse of the unrounded scale, then
// offset by half a level and truncated), so a file quantized by sluice and one by llama.cpp's
// llama-quantize without an importance matrix hold the same tensors. The K-quants, IQ4_NL and IQ4_XS are fitted by sluice's own search (quantize.cc says
// how): least squares over a few candidate scales per sub-block, then the sub-block scales
// quantized against the super-block's. They are not llama.cpp's bytes; the tests hold them to
// at least llama.cpp's accuracy on ../shared/models/quant.
#pragma once

#include <cstdint>

#include "gguf/gguf_types.h"

namespace sluice::kernels {

// Whether quantize_row can produce the type (the float types included).
bool quantize_supported(gguf::TensorType type);

// Writes n floats (a multiple of the type's block) as blocks of `type` to out, which holds
// n / block_elements * block_bytes bytes (2 or 4 per element for F16/BF16/F32).
// REQUIRES: quantize_supported(type).
void quantize_row(gguf::TensorType type, const float* x, int64_t n, uint8_t* out);

// Bytes of n elements of the type.
uint64_t quantized_bytes(gguf::TensorType type, int64_t n);

}  // namespace sluice::kernels
