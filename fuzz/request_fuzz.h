// The request fuzz target (request_fuzz.cc) as a function: returns how far the input got:
// 0 = not a complete HTTP request, 1 = HTTP but not a JSON object, 2 = through every parser.
#pragma once

#include <cstddef>
#include <cstdint>

int sluice_fuzz_request(const uint8_t* data, size_t size);
// A request body alone: 0 = not a JSON object, 1 = through every request parser.
int sluice_fuzz_body(const uint8_t* data, size_t size);
