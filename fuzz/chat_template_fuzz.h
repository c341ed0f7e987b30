// The chat template fuzz target (chat_template_fuzz.cc) as a function: returns how far the
// input got: 0 = not a template, 1 = parsed but its render failed, 2 = rendered.
#pragma once

#include <cstddef>
#include <cstdint>

int sluice_fuzz_chat_template(const uint8_t* data, size_t size);
