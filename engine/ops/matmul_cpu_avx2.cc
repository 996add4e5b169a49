// AVX2 + FMA kernels of cpu::Linear (built with -mavx2 -mfma -mf16c; run where the CPU has all
// three and lacks AVX-512F -- most AMD Zen 1-3 and client Intel parts -- and for int8 weights on
// AVX-512 CPUs too).
//
// A 16-output panel is two 8-wide vectors. A block of P panels times a group of R rows keeps
// 2*P*R accumulators in the 16 ymm registers: 1 panel x 6 rows (12 accumulators, 2 weight
// vectors, 1 broadcast) for batches, their rows split into groups of even sizes (Rows), 4 panels x
// 1 row for a single row, where each weight vector is used once and the loads are what counts
// (2 or 3 rows: 2 x 3 tiles for fp32, 2 x 2 for the other formats; int8 batches: 1 x 3; see
// Panels). Weights are widened from bf16/f16 to fp32 once per input column and block, with fp32
// sums; int8 multiplies in integers (BlockInt8).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu::kernels {
namespace {

constexpr int kPanel = 16;

// Weights k of a panel, outputs 8*half .. 8*half+7 (f32, f16; bf16: LoadPanelRow).
template <Format F>
inline __m256 LoadWeights(const void* panel, int64_t k, int half) {
  const int64_t at = k * kPanel + half * 8;
  if constexpr (F == Format::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(panel) + at);
  } else {
    static_assert(F == Format::kF16, "int8 has its own block (BlockInt8)");
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(panel) + at));
    return _mm256_cvtph_ps(h);
  }
}

// Weights k of a panel as two vectors. bf16: one 32-byte load split in-lane into the even outputs
// (the low halves of its 32-bit words, shifted up) and the odd ones (the high halves, masked) --
// two single-uop ops where widening each half would take a load and a lane-crossing shuffle; the
// sums come out in that order and Interleave restores it once per block. Others: outputs 0-7, 8-15.
template <Format F>
inline void LoadPanelRow(const void* panel, int64_t k, __m256& w0, __m256& w1) {
  if constexpr (F == Format::kBF16) {
    const __m256i h = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) + k * kPanel));
    w0 = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    w1 = _mm256_castsi256_ps(_mm256_and_si256(h, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    w0 = LoadWeights<F>(panel, k, 0);
    w1 = LoadWeights<F>(panel, k, 1);
  }
}

// bf16 sums (even outputs, odd outputs) back to (outputs 0-7, outputs 8-15).
inline void Interleave(__m256& even_lo, __m256& odd_hi) {
  const __m256 a = _mm256_unpacklo_ps(even_lo, odd_hi);  // 0 1 2 3 | 8 9 10 11
  const __m256 b = _mm256_unpackhi_ps(even_lo, odd_hi);  // 4 5 6 7 | 12 13 14 15
  even_lo = _mm256_permute2f128_ps(a, b, 0x20);
  odd_hi = _mm256_permute2f128_ps(a, b, 0x31);
}

// Stores acc (+ bias; int8: x the row's scale, then x the weights' scales, the order of the
// generic kernel) to outputs column .. column+15 of one row, clipped at a.out.
template <Format F>
inline void StorePanel(const LinearArgs& a, int64_t row, int64_t column, __m256 lo, __m256 hi) {
  const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
  if (valid == kPanel) {
    if constexpr (F == Format::kInt8) {
      const __m256 row_scale = _mm256_set1_ps(a.x_scales[row]);
      lo = _mm256_mul_ps(_mm256_mul_ps(lo, row_scale), _mm256_loadu_ps(a.scales + column));
      hi = _mm256_mul_ps(_mm256_mul_ps(hi, row_scale), _mm256_loadu_ps(a.scales + column + 8));
    }
    if (a.bias != nullptr) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(a.bias + column));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(a.bias + column + 8));
    }
    float* y = a.y + row * a.out + column;
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + 8, hi);
    return;
  }
  // The last panel of a matrix whose out is not a multiple of 16 (the scales of int8 cover
  // whole panels; the bias only `out`).
  alignas(32) float sums[kPanel];
  _mm256_store_ps(sums, lo);
  _mm256_store_ps(sums + 8, hi);
  float* y = a.y + row * a.out + column;
  for (int64_t j = 0; j < valid; ++j) {
    float v = sums[j];
    if constexpr (F == Format::kInt8) {
      v *= a.x_scales[row];
      v *= a.scales[column + j];
    }
    y[j] = v + (a.bias != nullptr ? a.bias[column + j] : 0.0f);
  }
}

// int8 x int16: per pair of input columns, a panel's 32 weight bytes widen to two vectors of 8
// (int16, int16) output pairs, and vpmaddwd against the row's broadcast activation pair gives
// 8 int32 products each -- 16 multiply-adds per instruction, where widening int8 to fp32 took
// three instructions for 8. The int32 sums are added into fp32 every kInt8BlockColumns.
template <int P, int R>
void BlockInt8(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const int16_t* x = a.x_int16 + first_row * a.x_int16_stride;
  const int64_t pairs = a.x_int16_stride / 2;
  // The fp32 totals stay in memory (touched once per block), so that the registers hold the
  // int32 sums, the widened weights and the broadcasts of the inner loop.
  alignas(32) float totals[R][P][kPanel] = {};
  for (int64_t i0 = 0; i0 < pairs; i0 += kInt8BlockColumns / 2) {
    const int64_t i1 = std::min(pairs, i0 + kInt8BlockColumns / 2);
    __m256i sums[R][P][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) sums[r][p][0] = sums[r][p][1] = _mm256_setzero_si256();
    }
    for (int64_t i = i0; i < i1; ++i) {
      __m256i w[P][2];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const auto* pair = reinterpret_cast<const __m128i*>(base + p * a.panel_bytes + i * 32);
        w[p][0] = _mm256_cvtepi8_epi16(_mm_loadu_si128(pair));
        w[p][1] = _mm256_cvtepi8_epi16(_mm_loadu_si128(pair + 1));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t xpair;
        std::memcpy(&xpair, x + r * a.x_int16_stride + 2 * i, 4);
        const __m256i xr = _mm256_set1_epi32(xpair);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          sums[r][p][0] = _mm256_add_epi32(sums[r][p][0], _mm256_madd_epi16(w[p][0], xr));
          sums[r][p][1] = _mm256_add_epi32(sums[r][p][1], _mm256_madd_epi16(w[p][1], xr));
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        float* t = totals[r][p];
        _mm256_store_ps(t, _mm256_add_ps(_mm256_load_ps(t), _mm256_cvtepi32_ps(sums[r][p][0])));
        _mm256_store_ps(t + 8,
                        _mm256_add_ps(_mm256_load_ps(t + 8), _mm256_cvtepi32_ps(sums[r][p][1])));
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      StorePanel<Format::kInt8>(a, first_row + r, column, _mm256_load_ps(totals[r][p]),
                                _mm256_load_ps(totals[r][p] + 8));
    }
  }
}

template <Format F, int P, int R>
void BlockFloat(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const float* x = a.x + first_row * a.in;
  __m256 acc[R][P][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p][0] = acc[r][p][1] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < a.in; ++k) {
    __m256 w[P][2];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) LoadPanelRow<F>(base + p * a.panel_bytes, k, w[p][0], w[p][1]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xr = _mm256_broadcast_ss(x + r * a.in + k);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        acc[r][p][0] = _mm256_fmadd_ps(w[p][0], xr, acc[r][p][0]);
        acc[r][p][1] = _mm256_fmadd_ps(w[p][1], xr, acc[r][p][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (F == Format::kBF16) Interleave(acc[r][p][0], acc[r][p][1]);
      StorePanel<F>(a, first_row + r, column, acc[r][p][0], acc[r][p][1]);
    }
  }
}

template <Format F, int P, int R>
void Block(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  if constexpr (F == Format::kInt8) {
    BlockInt8<P, R>(a, first_panel, first_row);
  } else {
    BlockFloat<F, P, R>(a, first_panel, first_row);
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

// Every row in the fewest groups of at most R, their sizes as even as can be (8 rows: 4 + 4,
// not 6 + 2). A group of g rows keeps 2 P g sums in flight, and an FMA's result is ready 4
// cycles after it starts on two pipes: fewer than 8 chains leave the pipes idle, so a small
// remainder group took as long as a full one (7 rows cost 1.6x 6 rows, at 1 x 6 tiles).
template <Format F, int P, int R>
void Rows(const LinearArgs& a, int64_t first_panel) {
  const int64_t groups = (a.rows + R - 1) / R;
  int64_t r = 0;
  for (int64_t g = groups; g > 0; --g) {
    const int64_t size = (a.rows - r + g - 1) / g;
    BlockOfSize<F, P, R>(a, first_panel, r, size);
    r += size;
  }
}

template <Format F>
void Panels(const LinearArgs& a, int64_t first, int64_t count) {
  int64_t p = first;
  const int64_t end = first + count;
  if (a.rows == 1) {
    // One row: four weight streams in flight per input column.
    for (; p + 4 <= end; p += 4) Rows<F, 4, 1>(a, p);
  } else if (a.rows <= 3) {
    // int8 takes 2 rows at a time here and 3 below: with its int32 sums, widened weights and
    // broadcasts, 2 x 3 or 1 x 6 tiles do not fit the 16 registers, and GCC's spills of the
    // sums made the 1 x 6 tile up to 1.7x slower than 1 x 3 (thread CPU time, 1024 x 1024).
    // bf16 and f16 take 2 as well: their 2 x 3 tile holds 12 sums, 4 widened weight vectors and
    // a broadcast (bf16: and its 0xFFFF0000 mask), one more than the 16 registers; the sum GCC
    // spilled made 3 rows cost 2.8x 2. fp32 weights are operands straight from memory.
    constexpr int kRows = F == Format::kF32 ? 3 : 2;
    for (; p + 2 <= end; p += 2) Rows<F, 2, kRows>(a, p);
  }
  constexpr int kTileRows = F == Format::kInt8 ? 3 : 6;
  for (; p < end; ++p) Rows<F, 1, kTileRows>(a, p);
}

}  // namespace

void LinearPanelsAvx2(const LinearArgs& args, int64_t first, int64_t count) {
  switch (args.format) {
    case Format::kF32:
      return Panels<Format::kF32>(args, first, count);
    case Format::kBF16:
      return Panels<Format::kBF16>(args, first, count);
    case Format::kF16:
      return Panels<Format::kF16>(args, first, count);
    case Format::kInt8:
      return Panels<Format::kInt8>(args, first, count);
  }
}

void QuantizeRowsAvx2(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales) {
  const int64_t stride = QuantizedStride(in);
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i limit = _mm256_set1_epi32(32767);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    int16_t* out = xq + r * stride;
    // The largest magnitude as float bits: above 0x7F7FFFFF for an infinity or a NaN.
    __m256i largest = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 8 <= in; k += 8) {
      const __m256i v = _mm256_and_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k)), magnitude);
      largest = _mm256_max_epu32(largest, v);
    }
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), largest);
    uint32_t largest_bits = 0;
    for (uint32_t lane : lanes) largest_bits = std::max(largest_bits, lane);
    for (; k < in; ++k) {
      uint32_t bits;
      std::memcpy(&bits, row + k, 4);
      largest_bits = std::max(largest_bits, bits & 0x7FFFFFFFu);
    }
    float max_abs;
    std::memcpy(&max_abs, &largest_bits, 4);
    if (largest_bits > 0x7F7FFFFFu || max_abs == 0.0f) {
      std::memset(out, 0, static_cast<size_t>(stride) * sizeof(int16_t));
      scales[r] = largest_bits > 0x7F7FFFFFu ? __builtin_nanf("") : 0.0f;
      continue;
    }
    scales[r] = max_abs / 32767.0f;
    const float inverse = 32767.0f / max_abs;
    const __m256 inverse8 = _mm256_set1_ps(inverse);
    // x * inverse rounded to nearest even (vcvtps2dq in the default rounding mode) and clamped,
    // 16 at a time: two vectors packed to int16 (vpackssdw works within 128-bit lanes; vpermq
    // puts the four quarters back in order).
    k = 0;
    for (; k + 16 <= in; k += 16) {
      __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + k), inverse8));
      __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(row + k + 8), inverse8));
      a = _mm256_min_epi32(_mm256_max_epi32(a, _mm256_sub_epi32(_mm256_setzero_si256(), limit)),
                           limit);
      b = _mm256_min_epi32(_mm256_max_epi32(b, _mm256_sub_epi32(_mm256_setzero_si256(), limit)),
                           limit);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), packed);
    }
    // The tail as QuantizeRows computes it: round to nearest even by adding 1.5 x 2^23.
    constexpr float kMagic = 12582912.0f;
    for (; k < in; ++k) {
      const float shifted = row[k] * inverse + kMagic;
      int32_t bits;
      std::memcpy(&bits, &shifted, 4);
      out[k] = static_cast<int16_t>(std::clamp(bits - 0x4B400000, -32767, 32767));
    }
    if (stride > in) out[in] = 0;
  }
}

}  // namespace abcd::cpu::kernels
