// Element-wise exp, erf and log1p over arrays, written as straight-line float arithmetic so the
// compiler vectorises them (one clone per instruction-set level, see vector_clones.h), for the
// loops where libm's scalar calls dominated a decode step (GELU, the ABC slot updates, softmax
// weights). Accuracy: exp within 2 ulp over its whole range (0 below -87.3, +inf above 88.7),
// erf within 2e-7 absolute, log1p within 3e-7 relative on [0, 1] (the only range the engine
// uses), sin and cos within 3e-7 absolute (the rfa random features). NaN propagates.
// Thread-safe (pure functions).
#pragma once

#include <cstdint>

namespace abcd::cpu {

// y[i] = exp(x[i]); y may equal x.
void ExpArray(const float* x, int64_t n, float* y);
// x[i] = gelu(x[i]) = 0.5 x (1 + erf(x / sqrt 2)).
void GeluErfInPlace(float* x, int64_t n);
// y[i] = log1p(x[i]) for x in [0, 1]; y may equal x.
void Log1pUnitArray(const float* x, int64_t n, float* y);
// x[i] = silu(x[i]) = x / (1 + exp(-x)) (ExpOne's accuracy).
void SiluArray(float* x, int64_t n);
// out[i] = silu(gate[i]) * up[i].
void SiluGateArray(const float* gate, const float* up, int64_t n, float* out);
// y[i] = a * y[i] + b * x[i] (the gated recurrences' decay-and-write).
void DecayAdd(float* y, float a, float b, const float* x, int64_t n);
// y[i] += a * x[i].
void Axpy(float* y, float a, const float* x, int64_t n);
// sum_i a[i] * b[i].
float Dot(const float* a, const float* b, int64_t n);
// sin_out[i] = sin(x[i]), cos_out[i] = cos(x[i]) within 3e-7 absolute for |x| <= 8192 (libm
// beyond); the outputs must not overlap x.
void SinCosArray(const float* x, int64_t n, float* sin_out, float* cos_out);

}  // namespace abcd::cpu
