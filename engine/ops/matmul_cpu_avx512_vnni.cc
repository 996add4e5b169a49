// The int8 kernel of cpu::Linear for AVX-512 CPUs with AVX512BW and AVX512-VNNI (built with
// -mavx512f -mavx512bw -mavx512vnni; run only where the CPU has all three: Intel Cascade Lake and
// later, AMD Zen 4 and later).
//
// The same integer products as the AVX2 kernel's BlockInt8, twice as wide: per pair of input
// columns, a panel's 32 weight bytes widen to one vector of 16 (int16, int16) output pairs, and
// vpdpwssd multiplies them by the row's broadcast activation pair and adds the 16 int32 products
// to the panel's sums in one instruction (32 multiply-adds). The int32 sums of each
// kInt8BlockColumns block are added into fp32 totals, and the totals scaled and stored in the
// order of the portable kernel, so every kernel gives the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu::kernels {
namespace {

constexpr int kPanel = 16;

// y[row, column .. column+15] = total x the row's scale x the weights' scales (+ bias), clipped
// at a.out.
inline void StoreInt8Panel(const LinearArgs& a, int64_t row, int64_t column, __m512 total) {
  const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
  __m512 v = _mm512_mul_ps(_mm512_mul_ps(total, _mm512_set1_ps(a.x_scales[row])),
                           _mm512_maskz_loadu_ps(mask, a.scales + column));
  if (a.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, a.bias + column));
  _mm512_mask_storeu_ps(a.y + row * a.out + column, mask, v);
}

// P panels x R rows: P * R int32 sums, P widened weight vectors and one broadcast in registers;
// the fp32 totals in memory, touched once per block.
template <int P, int R>
void BlockInt8(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const int16_t* x = a.x_int16 + first_row * a.x_int16_stride;
  const int64_t pairs = a.x_int16_stride / 2;
  alignas(64) float totals[R][P][kPanel] = {};
  for (int64_t i0 = 0; i0 < pairs; i0 += kInt8BlockColumns / 2) {
    const int64_t i1 = std::min(pairs, i0 + kInt8BlockColumns / 2);
    __m512i sums[R][P];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) sums[r][p] = _mm512_setzero_si512();
    }
    for (int64_t i = i0; i < i1; ++i) {
      __m512i w[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const auto* pair = reinterpret_cast<const __m256i*>(base + p * a.panel_bytes + i * 32);
        w[p] = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pair));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t xpair;
        std::memcpy(&xpair, x + r * a.x_int16_stride + 2 * i, 4);
        const __m512i xr = _mm512_set1_epi32(xpair);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) sums[r][p] = _mm512_dpwssd_epi32(sums[r][p], w[p], xr);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        float* t = totals[r][p];
        _mm512_store_ps(t, _mm512_add_ps(_mm512_load_ps(t), _mm512_cvtepi32_ps(sums[r][p])));
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      StoreInt8Panel(a, first_row + r, column, _mm512_load_ps(totals[r][p]));
    }
  }
}

// BlockInt8<P, size>, size in [1, R].
template <int P, int R>
void BlockOfSize(const LinearArgs& a, int64_t first_panel, int64_t first_row, int64_t size) {
  if constexpr (R > 1) {
    if (size < R) return BlockOfSize<P, R - 1>(a, first_panel, first_row, size);
  }
  BlockInt8<P, R>(a, first_panel, first_row);
}

// Every row in the fewest groups of at most R, their sizes as even as can be (7 rows: 3 + 2 + 2,
// not 3 + 3 + 1), as the other kernels do.
template <int P, int R>
void Rows(const LinearArgs& a, int64_t first_panel, int64_t r) {
  const int64_t groups = (a.rows - r + R - 1) / R;
  for (int64_t g = groups; g > 0; --g) {
    const int64_t size = (a.rows - r + g - 1) / g;
    BlockOfSize<P, R>(a, first_panel, r, size);
    r += size;
  }
}

}  // namespace

void LinearPanelsAvx512VnniInt8(const LinearArgs& args, int64_t first, int64_t count) {
  // One row: 8 weight streams in flight per column pair; more rows: 4 panels x 3 rows (12 sums,
  // 4 weight vectors, a broadcast). GCC 12 keeps a 4 x 4 or 4 x 6 tile's sums in registers but
  // copies each to the stack after every vpdpwssd (objdump of this object), so larger row
  // tiles ran at the 4 x 3 tile's speed or below.
  int64_t p = first;
  const int64_t end = first + count;
  if (args.rows == 1) {
    for (; p + 8 <= end; p += 8) Rows<8, 1>(args, p, 0);
  }
  for (; p + 4 <= end; p += 4) Rows<4, 3>(args, p, 0);
  for (; p < end; ++p) Rows<1, 3>(args, p, 0);
}

}  // namespace abcd::cpu::kernels
