// bf16 products for bf16 weights on AVX-512 CPUs with AVX512BW and AVX512_BF16 (built with
// -mavx512f -mavx512bw -mavx512bf16; run only where the CPU has all three: Intel Cooper Lake and
// Sapphire Rapids and later, AMD Zen 4 and later). Opt-in (cpu::LinearProducts::kBf16): the
// activations are rounded to bf16 once per product (RoundRowsToBf16), then each vdpbf16ps
// multiplies 16 outputs' weight pairs by a row's broadcast activation pair and adds both
// products to the fp32 sums: twice the multiply-adds of an fp32 FMA per instruction.
//
// A panel stores 16 outputs per input column (k-major), so columns k and k + 1 are 64
// contiguous bytes; vpermw interleaves them into the (k, k + 1) pairs vdpbf16ps takes, once per
// panel and column pair, shared by every row of the tile. Each row's sums run over the column
// pairs in order whatever the tile, so a row's outputs do not depend on the batch around it.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu::kernels {
namespace {

constexpr int kPanel = 16;

// Lane 2j takes output j's weight at column k (lane j of the load), lane 2j + 1 its weight at
// k + 1 (lane 16 + j).
inline __m512i PairIndex() {
  alignas(64) static constexpr uint16_t kIndex[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                      21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                      11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_load_si512(kIndex);
}

// Output pairs of columns 2i and 2i + 1 of a panel; past an odd `in`, column 2i + 1 reads as 0.
inline __m512i LoadPairs(const uint16_t* panel, int64_t i, int64_t in, __m512i index) {
  const uint16_t* columns = panel + 2 * i * kPanel;
  const __m512i both =
      2 * i + 1 < in
          ? _mm512_loadu_si512(columns)
          : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(columns)));
  return _mm512_permutexvar_epi16(index, both);
}

// P panels x R rows: P * R fp32 sums, P weight-pair vectors and one broadcast in registers.
template <int P, int R>
void BlockBf16(const LinearArgs& a, int64_t first_panel, int64_t first_row) {
  const char* base = static_cast<const char*>(a.panels) + first_panel * a.panel_bytes;
  const uint16_t* x = a.x_bf16 + first_row * a.x_bf16_stride;
  const int64_t pairs = a.x_bf16_stride / 2;
  const __m512i index = PairIndex();
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < pairs; ++i) {
    __m512bh w[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const auto* panel = reinterpret_cast<const uint16_t*>(base + p * a.panel_bytes);
      w[p] = reinterpret_cast<__m512bh>(LoadPairs(panel, i, a.in, index));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, x + r * a.x_bf16_stride + 2 * i, 4);
      const __m512bh xr = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], w[p], xr);
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
      _mm512_mask_storeu_ps(a.y + (first_row + r) * a.out + column, mask,
                            _mm512_add_ps(acc[r][p], bias));
    }
  }
}

// BlockBf16<P, size>, size in [1, R].
template <int P, int R>
void BlockOfSize(const LinearArgs& a, int64_t first_panel, int64_t first_row, int64_t size) {
  if constexpr (R > 1) {
    if (size < R) return BlockOfSize<P, R - 1>(a, first_panel, first_row, size);
  }
  BlockBf16<P, R>(a, first_panel, first_row);
}

// Every row in the fewest groups of at most R, their sizes as even as can be, as the other
// kernels do.
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

void RoundRowsToBf16(const float* x, int64_t rows, int64_t in, uint16_t* out) {
  const int64_t stride = Bf16Stride(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    uint16_t* dst = out + r * stride;
    int64_t k = 0;
    for (; k + 16 <= in; k += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(row + k));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), reinterpret_cast<const __m256i&>(h));
    }
    if (k < in) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (in - k)) - 1u);
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, row + k));
      alignas(32) uint16_t tail[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tail), reinterpret_cast<const __m256i&>(h));
      std::memcpy(dst + k, tail, static_cast<size_t>(in - k) * sizeof(uint16_t));
    }
    if (stride > in) dst[in] = 0;
  }
}

void LinearPanelsAvx512Bf16(const LinearArgs& args, int64_t first, int64_t count) {
  // One or two rows: 8 weight streams in flight per column pair; more rows: 4 panels x 6 rows
  // (24 sums, 4 weight vectors, a broadcast and the pair index).
  int64_t p = first;
  const int64_t end = first + count;
  if (args.rows <= 2) {
    for (; p + 8 <= end; p += 8) Rows<8, 2>(args, p, 0);
  }
  for (; p + 4 <= end; p += 4) Rows<4, 6>(args, p, 0);
  for (; p < end; ++p) Rows<1, 6>(args, p, 0);
}

}  // namespace abcd::cpu::kernels
