// Dense projection y = x W^T + b over a batch of rows (torch nn.Linear layout: W is [out, in]),
// with W a PackedMatrix (fp32, bf16, f16 or int8 weights; fp32 activations and sums).
//
// One call covers every row of a step, so the weights are read once per step whatever the
// batch: a decode step of 1 row streams W at memory speed, a prefill of hundreds of rows reuses
// each loaded weight vector across a register tile of rows. The output panels are split across
// `pool`'s threads (null: the caller's thread only). The AVX-512 kernels run where the CPU has
// AVX-512F, the AVX2 ones where it has AVX2, FMA and F16C; elsewhere a portable kernel over the
// same layout (compiler-vectorised).
#pragma once

#include <cstdint>

#include "engine/core/thread_pool.h"
#include "engine/ops/packed_matrix.h"

namespace abcd::cpu {

// x: [rows, w.in()], bias: [w.out()] or nullptr, y: [rows, w.out()] (overwritten).
void Linear(const float* x, int64_t rows, const PackedMatrix& w, const float* bias, float* y,
            ThreadPool* pool);

// Which kernel Linear uses on this CPU: "avx512-vnni" (AVX-512 with the VNNI int8 kernel),
// "avx512", "avx2" or "generic".
const char* LinearKernelName();

}  // namespace abcd::cpu
