// Dense projection y = x W^T + b over a batch of rows (torch nn.Linear layout: W is [out, in]).
// The CPU version calls the BLAS sgemm once for all rows: every token of every sequence in a
// step shares one GEMM, never one GEMV per sequence.
#pragma once

#include <cstdint>

namespace abcd::cpu {

// x: [rows, in], w: [out, in], bias: [out] or nullptr, y: [rows, out] (overwritten).
void Linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias,
            int64_t out, float* y);

}  // namespace abcd::cpu
