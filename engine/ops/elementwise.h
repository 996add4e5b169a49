// Row-wise and element-wise CPU ops of the transformer block: LayerNorm, activations,
// residual add, sinusoidal positions.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/thread_pool.h"
#include "engine/ops/op_kinds.h"

namespace abcd::cpu {

// y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta for each of `rows` rows of width d.
// With a `pool` (may be null), a batch of rows is split across its threads (each row's values
// are the same bits whatever the split).
void LayerNorm(const float* x, int64_t rows, int64_t d, const float* gamma, const float* beta,
               float eps, float* y, ThreadPool* pool = nullptr);

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * gamma (RMSNorm, statistics in double), `rows` rows of
// width d; x and y may be the same buffer. Rows split across `pool` as LayerNorm's.
void RmsNorm(const float* x, int64_t rows, int64_t d, const float* gamma, float eps, float* y,
             ThreadPool* pool = nullptr);

// SwiGLU: out[r][i] = silu(gate_up[r][i]) * gate_up[r][ff + i] for `rows` rows of [gate; up]
// (2 ff wide) into rows of ff, split across `pool`'s threads (may be null).
void SwiGlu(const float* gate_up, int64_t rows, int64_t ff, float* out, ThreadPool* pool = nullptr);

// silu(x) = x * sigmoid(x) in place over n values.
void SiluInPlace(float* x, int64_t n);

// Rotary position embedding, half-split (HF rotate_half): the angle of pair i at `position` is
// fp32(position) * inv_freq[i] (as transformers computes it); cos_sin receives D/2 cosines then
// D/2 sines for RotateHalf.
void RopeAngles(int64_t position, const float* inv_freq, int half, float* cos_sin);
// Rotates `heads` consecutive vectors of width 2 * half in place by the angles of RopeAngles:
// (x_i, x_{i+half}) -> (x_i c - x_{i+half} s, x_{i+half} c + x_i s).
void RotateHalf(float* x, int heads, int half, const float* cos_sin);

// In-place activation over n values (gelu is the erf form, as torch's default), split across
// `pool`'s threads when there is enough of it (pool may be null).
void Activate(Activation activation, float* x, int64_t n, ThreadPool* pool = nullptr);

// y += x over n values, split across `pool`'s threads (may be null) when there are many.
void AddInPlace(float* y, const float* x, int64_t n, ThreadPool* pool = nullptr);

// Adds the sinusoidal encoding of `position` to row (width d, even): pe[2i] = sin(p /
// 10000^(2i/d)), pe[2i+1] = cos(...). Computed in double, so any position is exact to fp32
// rounding.
void AddSinusoidalPosition(int64_t position, int64_t d, float* row);
// The same with the d/2 denominators 10000^(2i/d) computed once (SinusoidalDenominators):
// identical values, without a pow per element on every token.
std::vector<double> SinusoidalDenominators(int64_t d);
void AddSinusoidalPosition(int64_t position, const std::vector<double>& denominators, float* row);

}  // namespace abcd::cpu
