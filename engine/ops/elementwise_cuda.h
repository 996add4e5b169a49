// Row-wise and element-wise ops of the transformer block on the device (the CUDA twins of
// elementwise.h, plus the token embedding of Model::Embed and the bias add of a projection).
// Every pointer is a device pointer; every op only enqueues work on context.stream() and
// returns the launch status (kernels run asynchronously, so their errors surface at the next
// synchronisation). Results match the CPU ops to fp32 rounding (see each op).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda_context.h"
#include "engine/ops/op_kinds.h"

namespace abcd::cuda {

// y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta for each of `rows` rows of width d.
// One block per row; fp32 two-pass statistics (the mean, then the variance of the centred
// values, so a large common offset does not cancel), float4 loads when d % 4 == 0 and the
// pointers are 16-byte aligned. x and y may be the same buffer.
absl::Status LayerNorm(CudaContext& context, const float* x, int64_t rows, int64_t d,
                       const float* gamma, const float* beta, float eps, float* y);

// In-place activation over n values: relu, or gelu in the erf form (as cpu::Activate).
absl::Status Activate(CudaContext& context, Activation activation, float* x, int64_t n);

// y += x over n values.
absl::Status AddInPlace(CudaContext& context, float* y, const float* x, int64_t n);

// y[r, c] += bias[c] for a [rows, width] matrix.
absl::Status AddBias(CudaContext& context, float* y, int64_t rows, int64_t width,
                     const float* bias);

// out[r] = table[tokens[r]] * scale + the sinusoidal encoding of positions[r] (the formula of
// cpu::AddSinusoidalPosition, angles in double so long positions stay exact), for a [V, d]
// embedding table. Tokens must lie in [0, V): the caller validates them on the host (as
// Model does), since a kernel cannot report a bad id.
absl::Status Embed(CudaContext& context, const float* table, const int32_t* tokens,
                   const int64_t* positions, int64_t rows, int64_t d, float scale, float* out);

// y[i] = x[rows[i]] for `count` rows of width d (the rows whose logits a forward pass needs,
// packed before the LM head). Row indices must lie in x's rows: the caller checks them on the
// host. x and y must not overlap.
absl::Status GatherRows(CudaContext& context, const float* x, const int32_t* rows, int64_t count,
                        int64_t d, float* y);

}  // namespace abcd::cuda
