// AVX-512 kernels of cpu::Linear (built with -mavx512f; run only where the CPU has it).
//
// A block of P panels (16 outputs each) times a group of R rows keeps P*R accumulators in
// registers; each 16-wide weight vector is loaded (and widened from bf16/f16; int8 has its own
// kernels: VNNI or AVX2) once per input column and multiplied by one broadcast activation per row.
// P*R <= 24 leaves registers for the weights and the broadcast.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu::kernels {
namespace {

inline __mmask16 FirstLanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

constexpr int kPanel = 16;

template <Format F>
inline __m512 LoadWeights(const void* panel, int64_t k) {
  if constexpr (F == Format::kF32) {
    return _mm512_load_ps(static_cast<const float*>(panel) + k * kPanel);
  } else if constexpr (F == Format::kBF16) {
    const __m256i h = _mm256_load_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) + k * kPanel));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    static_assert(F == Format::kF16, "int8 runs the AVX2 kernel");
    const __m256i h = _mm256_load_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) + k * kPanel));
    return _mm512_cvtph_ps(h);
  }
}

template <Format F, int P, int R>
void Block(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const float* x = a.x + first_row * a.in;
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < a.in; ++k) {
    __m512 w[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) w[p] = LoadWeights<F>(base + p * a.panel_bytes, k);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * a.in + k]);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(w[p], xr, acc[r][p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
    const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512 bias =
        a.bias != nullptr ? _mm512_maskz_loadu_ps(mask, a.bias + column) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_add_ps(acc[r][p], bias);
      _mm512_mask_storeu_ps(a.y + (first_row + r) * a.out + column, mask, v);
    }
  }
}

// Block<F, P, size>, size in [1, R].
template <Format F, int P, int R>
void BlockOfSize(const LinearArgs& a, int64_t first_panel, int64_t first_row, int64_t size) {
  if constexpr (R > 1) {
    if (size < R) return BlockOfSize<F, P, R - 1>(a, first_panel, first_row, size);
  }
  Block<F, P, R>(a, first_panel, first_row);
}

// Every row in the fewest groups of at most R, their sizes as even as can be (7 rows: 4 + 3, not
// 6 + 1), as the AVX2 kernel does: a group of g rows keeps P g sums in flight, and a small
// remainder group leaves the FMA pipes waiting on their latency.
template <Format F, int P, int R>
void Rows(const LinearArgs& a, int64_t first_panel, int64_t r) {
  const int64_t groups = (a.rows - r + R - 1) / R;
  for (int64_t g = groups; g > 0; --g) {
    const int64_t size = (a.rows - r + g - 1) / g;
    BlockOfSize<F, P, R>(a, first_panel, r, size);
    r += size;
  }
}

template <Format F>
void Panels(const LinearArgs& a, int64_t first, int64_t count) {
  // Few rows: wide blocks (8 panels) so each weight stream keeps the loads busy; more rows:
  // 4 panels x 6 rows, the register-filling tile.
  int64_t p = first;
  const int64_t end = first + count;
  if (a.rows <= 2) {
    for (; p + 8 <= end; p += 8) Rows<F, 8, 2>(a, p, 0);
  }
  for (; p + 4 <= end; p += 4) Rows<F, 4, 6>(a, p, 0);
  for (; p + 2 <= end; p += 2) Rows<F, 2, 6>(a, p, 0);
  for (; p < end; ++p) Rows<F, 1, 6>(a, p, 0);
}

// The largest magnitude of x[0, in) as its float bits (sign cleared); above 0x7F7FFFFF when the
// row holds an infinity or a NaN (their magnitude bits are larger than any finite float's).
uint32_t MagnitudeBits(const float* x, int64_t in) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i largest = _mm512_setzero_si512();
  for (int64_t k = 0; k < in; k += 16) {
    const __m512i v = _mm512_and_si512(
        _mm512_castps_si512(_mm512_maskz_loadu_ps(FirstLanes(in - k), x + k)), magnitude);
    largest = _mm512_max_epu32(largest, v);
  }
  return _mm512_reduce_max_epu32(largest);
}

// x[k] * inverse rounded to nearest even (vcvtps2dq in the default rounding mode, as the
// portable 1.5 x 2^23 trick rounds) and clamped to +-limit, for the 16 lanes of `mask`.
inline __m512i Quantize16(const float* x, __mmask16 mask, __m512 inverse, int32_t limit) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x), inverse));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-limit)), _mm512_set1_epi32(limit));
}

// A row's scale (max |x| / limit) and the multiplier that quantises it. False when the row
// quantises to zeros: scale NaN for a row with a non-finite value, 0 for an all-zero row.
inline bool RowScale(const float* row, int64_t in, float limit, float* scale, __m512* inverse) {
  const uint32_t largest = MagnitudeBits(row, in);
  float max_abs;
  std::memcpy(&max_abs, &largest, 4);
  if (largest > 0x7F7FFFFFu || max_abs == 0.0f) {
    *scale = largest > 0x7F7FFFFFu ? __builtin_nanf("") : 0.0f;
    return false;
  }
  *scale = max_abs / limit;
  *inverse = _mm512_set1_ps(limit / max_abs);
  return true;
}

}  // namespace

void LinearPanelsAvx512(const LinearArgs& args, int64_t first, int64_t count) {
  switch (args.format) {
    case Format::kF32:
      return Panels<Format::kF32>(args, first, count);
    case Format::kBF16:
      return Panels<Format::kBF16>(args, first, count);
    case Format::kF16:
      return Panels<Format::kF16>(args, first, count);
    case Format::kInt8: {
      // Integer products over int8 x int16 pairs: VNNI's vpdpwssd where the CPU has it (its own
      // translation unit, compiled for AVX512BW + VNNI), else the AVX2 kernel's vpmaddwd.
      static const bool vnni = CpuRunsAvx512VnniKernels();
      if (vnni) return LinearPanelsAvx512VnniInt8(args, first, count);
      return LinearPanelsAvx2(args, first, count);
    }
  }
}

void QuantizeRowsAvx512(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales) {
  const int64_t stride = QuantizedStride(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    int16_t* out = xq + r * stride;
    __m512 inverse;
    if (!RowScale(row, in, 32767.0f, &scales[r], &inverse)) {
      std::memset(out, 0, static_cast<size_t>(stride) * sizeof(int16_t));
      continue;
    }
    for (int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = FirstLanes(in - k);
      _mm512_mask_cvtepi32_storeu_epi16(out + k, mask, Quantize16(row + k, mask, inverse, 32767));
    }
    if (stride > in) out[in] = 0;
  }
}

void QuantizeRowsU8(const float* x, int64_t rows, int64_t in, uint8_t* xq, float* scales) {
  const int64_t stride = QuadStride(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    uint8_t* out = xq + r * stride;
    __m512 inverse;
    if (!RowScale(row, in, 127.0f, &scales[r], &inverse)) {
      std::memset(out, 128, static_cast<size_t>(stride));
      continue;
    }
    const __m512i zero_code = _mm512_set1_epi32(128);
    for (int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = FirstLanes(in - k);
      _mm512_mask_cvtepi32_storeu_epi8(
          out + k, mask, _mm512_add_epi32(Quantize16(row + k, mask, inverse, 127), zero_code));
    }
    std::memset(out + in, 128, static_cast<size_t>(stride - in));
  }
}

}  // namespace abcd::cpu::kernels
