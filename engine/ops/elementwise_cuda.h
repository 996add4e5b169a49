// Row-wise and element-wise ops of the transformer block on the device (the CUDA twins of
// elementwise.h, plus the token embedding of Model::Embed, the bias add of a projection and the
// rounding of a projection's input to its weights' type).
// Every pointer is a device pointer; every op only enqueues work on context.stream() and
// returns the launch status (kernels run asynchronously, so their errors surface at the next
// synchronisation). Results match the CPU ops to fp32 rounding (see each op).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda_context.h"
#include "engine/ops/matmul_cuda.h"
#include "engine/ops/op_kinds.h"

namespace abcd::cuda {

// y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta for each of `rows` rows of width d.
// One block per row; fp32 two-pass statistics (the mean, then the variance of the centred
// values, so a large common offset does not cancel), float4 loads when d % 4 == 0 and the
// pointers are 16-byte aligned. x and y may be the same buffer.
absl::Status LayerNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                       const float* gamma, const float* beta, float eps, float* y);

// The same LayerNorm with y written as `type` (bf16 or fp16 rounded to nearest even, or fp32):
// the input of a LinearRounded with weights of that type, without a separate rounding pass.
// x and y must not overlap unless type is kF32.
absl::Status LayerNormRounded(CudaContext& context, const float* x, int64_t rows, int64_t d,
                              const float* gamma, const float* beta, float eps, WeightType type,
                              void* y);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gamma (cpu::RmsNorm, Llama's and fla's norm) for
// each of `rows` rows of width d; fp32 statistics. x and y may be the same buffer.
absl::Status RmsNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                     const float* gamma, float eps, float* y);
// The same with y written as `type` (the next LinearRounded's input); x and y must not overlap
// unless type is kF32.
absl::Status RmsNormRounded(CudaContext& context, const float* x, int64_t rows, int64_t d,
                            const float* gamma, float eps, WeightType type, void* y);

// SwiGLU: out[r, c] = silu(gate_up[r, c]) * gate_up[r, ff + c] for `rows` rows of gate | up
// (2 ff columns; cpu::SwiGlu), written as `type`; out must not overlap gate_up.
absl::Status SwiGluRounded(CudaContext& context, const float* gate_up, int64_t rows, int64_t ff,
                           WeightType type, void* out);

// out = activation(x) over n values, relu or gelu in the erf form (as cpu::Activate), written as
// `type`: the input of the FFN's second LinearRounded. With kF32, x and out may be the same
// buffer (in place); otherwise they must not overlap.
absl::Status ActivateRounded(CudaContext& context, Activation activation, const float* x, int64_t n,
                             WeightType type, void* out);

// out = x written as `type` (round to nearest even; kF32 copies) over n values; x and out must
// not overlap.
absl::Status RoundTo(CudaContext& context, const float* x, int64_t n, WeightType type, void* out);

// y[r, c] += bias[c] for a [rows, width] matrix (Linear's fallback where cuBLASLt has no bias
// epilogue for a shape).
absl::Status AddBias(CudaContext& context, float* y, int64_t rows, int64_t width,
                     const float* bias);

// out[r] = table[tokens[r]] * scale + the sinusoidal encoding of positions[r] (the formula of
// cpu::AddSinusoidalPosition, angles in double so long positions stay exact), for a [V, d]
// embedding table; null `positions`: no positional term (rotary and fla models). Tokens must lie in
// [0, V): the caller validates them on the host (as Model does), since a kernel cannot report a bad
// id.
absl::Status Embed(CudaContext& context, const float* table, const int32_t* tokens,
                   const int64_t* positions, int64_t rows, int64_t d, float scale, float* out);

// y[i] = x[rows[i]] for `count` rows of width d (the rows whose logits a forward pass needs,
// packed before the LM head). Row indices must lie in x's rows: the caller checks them on the
// host. x and y must not overlap.
absl::Status GatherRows(CudaContext& context, const float* x, const int32_t* rows, int64_t count,
                        int64_t d, float* y);

}  // namespace abcd::cuda
