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
#include "engine/ops/cpu_context.h"
#include "engine/ops/packed_matrix.h"

namespace abcd::cpu {

// How bf16 weights are multiplied. kFloat32 (the default): widened to fp32 and multiplied by
// the fp32 activations (exact products, fp32 sums). kBf16: the activations are rounded to bf16
// and the products run as AVX512_BF16 dot products (fp32 sums): about twice the multiply-adds
// per second where a product is compute-bound (prompts, large batches), with the rounding of
// bf16 activations (llama.cpp and CTranslate2's bfloat16 compute work the same way). Other
// weight formats ignore it. Only where Bf16ProductsSupported().
// (LinearProducts is declared in cpu_context.h.)
bool Bf16ProductsSupported();
// kInt8 (W8A8): int8 weights times activations quantised to 8 bits per row (scale max|x| / 127,
// where the default quantises them to 16 bits), as AVX-512 VNNI vpdpbusd products summed
// exactly in int32 blocks: 64 multiply-adds an instruction against the default's 32, with the
// rounding of 8-bit activations (llama.cpp's q8_0 dot products quantise activations the same
// way, per block of 32). Other weight formats ignore it. Only where W8A8Supported().
bool W8A8Supported();

// x: [rows, w.in()], bias: [w.out()] or nullptr, y: [rows, w.out()] (overwritten).
void Linear(const float* x, int64_t rows, const PackedMatrix& w, const float* bias, float* y,
            ThreadPool* pool, LinearProducts products = LinearProducts::kFloat32);

// The same on a forward pass's context: its pool and its products setting.
inline void Linear(const float* x, int64_t rows, const PackedMatrix& w, const float* bias, float* y,
                   CpuContext& ctx) {
  Linear(x, rows, w, bias, y, &ctx.pool(), ctx.linear_products());
}

// Which kernel Linear uses on this CPU: "avx512-vnni" (AVX-512 with the VNNI int8 kernel),
// "avx512", "avx2" or "generic".
const char* LinearKernelName();

}  // namespace abcd::cpu
