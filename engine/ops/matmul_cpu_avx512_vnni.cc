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

// W8A8's index for vpermw: output j's weights at columns 4q .. 4q + 3 (its 16-bit unit in pair
// 2q, lanes 0-15 of a load, then in pair 2q + 1, lanes 16-31) into dword j.
inline __m512i QuadIndex() {
  alignas(64) static constexpr uint16_t kQuadIndex[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_load_si512(kQuadIndex);
}

// Quad q of a panel in quad order (past the panel's `pairs` stored pairs, zeros).
inline __m512i LoadQuad(const char* panel, int64_t q, int64_t pairs, __m512i index) {
  const char* quad = panel + q * 64;
  const __m512i both =
      2 * q + 1 < pairs
          ? _mm512_loadu_si512(quad)
          : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(quad)));
  return _mm512_permutexvar_epi16(index, both);
}

// W8A8 (LinearProducts::kInt8), up to 8 rows (more rows take StagedPanels below): P panels
// x R rows of 8-bit activations. Per quad of input
// columns (pairs 2q and 2q + 1 of a panel: 64 contiguous bytes), vpermw puts output j's four
// weights in dword j, and vpdpbusd multiplies them by the row's broadcast activation quad (64
// multiply-adds). Activations are stored as q + 128 (unsigned); the 128 x sum(w) this adds is
// summed by one more vpdpbusd per panel (by a quad of 128s), shared by the R rows, and taken
// off each block's int32 sums, which then hold sum(w x q) exactly.
template <int P, int R>
void BlockW8A8(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const uint8_t* x = a.x_u8 + first_row * a.x_u8_stride;
  const int64_t quads = a.x_u8_stride / 4;
  const int64_t pairs = (a.in + 1) / 2;  // the pairs a panel stores
  const __m512i index = QuadIndex();
  const __m512i offsets = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) float totals[R][P][kPanel] = {};
  for (int64_t q0 = 0; q0 < quads; q0 += kInt8BlockColumns / 4) {
    const int64_t q1 = std::min(quads, q0 + kInt8BlockColumns / 4);
    __m512i sums[R][P];
    __m512i offset_sums[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      offset_sums[p] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sums[r][p] = _mm512_setzero_si512();
    }
    for (int64_t q = q0; q < q1; ++q) {
      __m512i w[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        w[p] = LoadQuad(base + p * a.panel_bytes, q, pairs, index);
        offset_sums[p] = _mm512_dpbusd_epi32(offset_sums[p], offsets, w[p]);
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        int32_t xquad;
        std::memcpy(&xquad, x + r * a.x_u8_stride + 4 * q, 4);
        const __m512i xr = _mm512_set1_epi32(xquad);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) sums[r][p] = _mm512_dpbusd_epi32(sums[r][p], xr, w[p]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        float* t = totals[r][p];
        const __m512i exact = _mm512_sub_epi32(sums[r][p], offset_sums[p]);
        _mm512_store_ps(t, _mm512_add_ps(_mm512_load_ps(t), _mm512_cvtepi32_ps(exact)));
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

// Several rows: each 256-column block of P panels is put in quad order once (vpermw) with its
// offset sums, on the stack, and then every row tile multiplies it with loads and vpdpbusd
// alone; the block totals are added in y (the same fp32 additions in the same order as
// BlockW8A8, so a row's outputs are the same bits alone or in a batch), and scaled at the end.
constexpr int kStagedPanels = 4;
constexpr int64_t kBlockQuads = kInt8BlockColumns / 4;

struct StagedBlock {
  alignas(64) int8_t weights[kStagedPanels][kBlockQuads][64];
  alignas(64) int32_t offsets[kStagedPanels][kPanel];
};

void StageBlock(const LinearArgs& a, int64_t first_panel, int panels, int64_t q0, int64_t q1,
                StagedBlock& staged) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const int64_t pairs = (a.in + 1) / 2;
  const __m512i index = QuadIndex();
  const __m512i offsets = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int p = 0; p < panels; ++p) {
    __m512i offset_sums = _mm512_setzero_si512();
    for (int64_t q = q0; q < q1; ++q) {
      const __m512i w = LoadQuad(base + p * a.panel_bytes, q, pairs, index);
      _mm512_store_si512(staged.weights[p][q - q0], w);
      offset_sums = _mm512_dpbusd_epi32(offset_sums, offsets, w);
    }
    _mm512_store_si512(staged.offsets[p], offset_sums);
  }
}

// y[rows, panels' columns] (+)= the block's exact sums for R rows and P staged panels.
template <int P, int R>
void SumStaged(const LinearArgs& a, const StagedBlock& staged, int64_t first_panel, int64_t q0,
               int64_t q1, int64_t first_row, bool first_block) {
  const uint8_t* x = a.x_u8 + first_row * a.x_u8_stride;
  __m512i sums[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) sums[r][p] = _mm512_setzero_si512();
  }
  for (int64_t q = q0; q < q1; ++q) {
    __m512i w[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) w[p] = _mm512_load_si512(staged.weights[p][q - q0]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t xquad;
      std::memcpy(&xquad, x + r * a.x_u8_stride + 4 * q, 4);
      const __m512i xr = _mm512_set1_epi32(xquad);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) sums[r][p] = _mm512_dpbusd_epi32(sums[r][p], xr, w[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
    const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    const __m512i offset_sums = _mm512_load_si512(staged.offsets[p]);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      float* y = a.y + (first_row + r) * a.out + column;
      __m512 total = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums[r][p], offset_sums));
      if (!first_block) total = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), total);
      _mm512_mask_storeu_ps(y, mask, total);
    }
  }
}

template <int P, int R>
void SumStagedOfSize(const LinearArgs& a, const StagedBlock& staged, int64_t first_panel,
                     int64_t q0, int64_t q1, int64_t first_row, int64_t size, bool first_block) {
  if constexpr (R > 1) {
    if (size < R) {
      return SumStagedOfSize<P, R - 1>(a, staged, first_panel, q0, q1, first_row, size,
                                       first_block);
    }
  }
  SumStaged<P, R>(a, staged, first_panel, q0, q1, first_row, first_block);
}

// Panels [first_panel, first_panel + P) for every row: block by block, staged once, every row
// in the fewest tiles of at most R rows of even size; then the totals scaled in y.
template <int P, int R>
void StagedPanels(const LinearArgs& a, int64_t first_panel) {
  const int64_t quads = a.x_u8_stride / 4;
  StagedBlock staged;
  for (int64_t q0 = 0; q0 < quads; q0 += kBlockQuads) {
    const int64_t q1 = std::min(quads, q0 + kBlockQuads);
    StageBlock(a, first_panel, P, q0, q1, staged);
    const int64_t groups = (a.rows + R - 1) / R;
    int64_t r = 0;
    for (int64_t g = groups; g > 0; --g) {
      const int64_t size = (a.rows - r + g - 1) / g;
      SumStagedOfSize<P, R>(a, staged, first_panel, q0, q1, r, size, q0 == 0);
      r += size;
    }
  }
  for (int p = 0; p < P; ++p) {
    const int64_t column = (first_panel + p) * kPanel;
    if (column >= a.out) break;
    for (int64_t row = 0; row < a.rows; ++row) {
      const float* y = a.y + row * a.out + column;
      const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      StoreInt8Panel(a, row, column, _mm512_maskz_loadu_ps(mask, y));
    }
  }
}

// Panels [p, end) for R rows, P at a time, each weight quad put in quad order as it streams
// (BlockW8A8) instead of staged: for up to 8 rows this costs less than staging (cpu::Linear,
// 2048 x 5632, 2 threads, Zen 4: 2 rows 208 -> 104 us, 4 rows 246 -> 168, 8 rows 341 -> 255),
// and the sums are the same bits (the same fp32 additions in the same order).
template <int P, int R>
void UnstagedW8A8Rows(const LinearArgs& a, int64_t p, int64_t end) {
  for (; p + P <= end; p += P) BlockW8A8<P, R>(a, p, 0);
  for (; p < end; ++p) BlockW8A8<1, R>(a, p, 0);
}

}  // namespace

void LinearPanelsAvx512VnniW8A8(const LinearArgs& args, int64_t first, int64_t count) {
  int64_t p = first;
  const int64_t end = first + count;
  if (args.rows == 1) {
    // One row streams the weights once: 8 panels in flight, put in quad order as they come.
    for (; p + 8 <= end; p += 8) BlockW8A8<8, 1>(args, p, 0);
    for (; p < end; ++p) BlockW8A8<1, 1>(args, p, 0);
    return;
  }
  // 2-4 rows: 4 panels x R rows (up to 16 sums); 5-8 rows: 2 panels x R (up to 16).
  switch (args.rows) {
    case 2:
      return UnstagedW8A8Rows<4, 2>(args, p, end);
    case 3:
      return UnstagedW8A8Rows<4, 3>(args, p, end);
    case 4:
      return UnstagedW8A8Rows<4, 4>(args, p, end);
    case 5:
      return UnstagedW8A8Rows<2, 5>(args, p, end);
    case 6:
      return UnstagedW8A8Rows<2, 6>(args, p, end);
    case 7:
      return UnstagedW8A8Rows<2, 7>(args, p, end);
    case 8:
      return UnstagedW8A8Rows<2, 8>(args, p, end);
    default:
      break;
  }
  // 4 panels x 6 rows: 24 sums, 4 weight vectors and a broadcast.
  for (; p + kStagedPanels <= end; p += kStagedPanels) StagedPanels<kStagedPanels, 6>(args, p);
  for (; p < end; ++p) StagedPanels<1, 6>(args, p);
}

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
