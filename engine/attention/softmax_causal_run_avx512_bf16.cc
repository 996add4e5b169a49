// The causal run's bf16-products kernels (softmax_bf16_kernels.h), built with -mavx512f
// -mavx512bw -mavx512bf16 and run only where the CPU has all three. Each vdpbf16ps multiplies
// 16 pairs of bf16 values by a broadcast pair and adds both products to 16 fp32 sums: 32
// multiply-adds an instruction, twice an fp32 FMA's, with no widening of the cached rows.
#include <immintrin.h>

#include <cstring>

#include "engine/attention/softmax_bf16_kernels.h"

namespace abcd::softmax_bf16 {
namespace {

inline __mmask16 FirstLanes(int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

inline __m512bh Broadcast(const void* pair) {
  int32_t bits;
  std::memcpy(&bits, pair, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(bits));
}

// r[k] becomes the dwords k of r[0..15] (a 16 x 16 dword transpose): pairs of rows interleaved
// by dwords, then by quadwords (r[4q + m] then holds dword 4L + m of rows 4q..4q+3 in its 128-bit
// lane L), then the 128-bit lanes transposed in two rounds.
inline void Transpose16x16(__m512i r[16]) {
  __m512i a[16];
  for (int p = 0; p < 8; ++p) {
    a[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
  __m512i b[16];
  for (int q = 0; q < 4; ++q) {
    b[4 * q] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x44);
    const __m512i c1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xEE);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x44);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xEE);
    r[m] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    r[4 + m] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
    r[8 + m] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    r[12 + m] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
  }
}

// QN queries x KG groups of 16 keys: QN * KG sums, KG key vectors and a broadcast in registers.
template <int QN, int KG>
inline void ScoreBlock(const uint16_t* q, const uint32_t* keys, int head_dim, float* s,
                       int64_t ld) {
  const int pairs = head_dim / 2;
  const int64_t group_dwords = int64_t{pairs} * 16;
  __m512 acc[QN][KG];
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 4
    for (int g = 0; g < KG; ++g) acc[i][g] = _mm512_setzero_ps();
  }
  for (int p = 0; p < pairs; ++p) {
    __m512bh k[KG];
#pragma GCC unroll 4
    for (int g = 0; g < KG; ++g) {
      k[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(keys + g * group_dwords + p * 16));
    }
#pragma GCC unroll 4
    for (int i = 0; i < QN; ++i) {
      const __m512bh qp = Broadcast(q + i * head_dim + 2 * p);
#pragma GCC unroll 4
      for (int g = 0; g < KG; ++g) acc[i][g] = _mm512_dpbf16_ps(acc[i][g], qp, k[g]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 4
    for (int g = 0; g < KG; ++g) _mm512_storeu_ps(s + i * ld + g * 16, acc[i][g]);
  }
}

template <int QN>
inline void ScoreQueries(const uint16_t* q, const uint32_t* keys, int head_dim, int64_t groups,
                         float* s, int64_t ld) {
  constexpr int kGroups = 4;
  const int64_t group_dwords = int64_t{head_dim} / 2 * 16;
  int64_t g = 0;
  for (; g + kGroups <= groups; g += kGroups) {
    ScoreBlock<QN, kGroups>(q, keys + g * group_dwords, head_dim, s + g * 16, ld);
  }
  for (; g < groups; ++g) ScoreBlock<QN, 1>(q, keys + g * group_dwords, head_dim, s + g * 16, ld);
}

// QN queries x CV vectors of 16 output columns from c0: QN * CV sums, CV value vectors and a
// broadcast in registers, over `row_pairs` pairs of rows.
template <int QN, int CV>
inline void PvBlock(const uint32_t* p, int64_t p_ld, const uint32_t* values, int head_dim,
                    int64_t row_pairs, int c0, const float* rescale, float* out) {
  __m512 acc[QN][CV];
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < CV; ++c) {
      acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(out + i * head_dim + c0 + 16 * c),
                                _mm512_set1_ps(rescale[i]));
    }
  }
  for (int64_t r = 0; r < row_pairs; ++r) {
    __m512bh v[CV];
    const uint32_t* row = values + r * head_dim + c0;
#pragma GCC unroll 4
    for (int c = 0; c < CV; ++c) {
      v[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + 16 * c));
    }
#pragma GCC unroll 4
    for (int i = 0; i < QN; ++i) {
      const __m512bh w = Broadcast(p + i * p_ld + r);
#pragma GCC unroll 4
      for (int c = 0; c < CV; ++c) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], w, v[c]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 4
    for (int c = 0; c < CV; ++c) _mm512_storeu_ps(out + i * head_dim + c0 + 16 * c, acc[i][c]);
  }
}

template <int QN>
inline void PvQueries(const uint32_t* p, int64_t p_ld, const uint32_t* values, int head_dim,
                      int64_t row_pairs, const float* rescale, float* out) {
  constexpr int kVectors = 4;
  int c = 0;
  for (; c + 16 * kVectors <= head_dim; c += 16 * kVectors) {
    PvBlock<QN, kVectors>(p, p_ld, values, head_dim, row_pairs, c, rescale, out);
  }
  for (; c < head_dim; c += 16)
    PvBlock<QN, 1>(p, p_ld, values, head_dim, row_pairs, c, rescale, out);
}

constexpr int kQueries = 4;  // queries per register tile (both products)

}  // namespace

void PackKeys(const uint16_t* keys, int64_t n, int64_t stride, int head_dim, uint32_t* packed) {
  const int64_t pairs = head_dim / 2;
  for (int64_t g = 0; g * 16 < n; ++g) {
    const int64_t rows = n - g * 16 < 16 ? n - g * 16 : 16;
    uint32_t* out = packed + g * pairs * 16;
    for (int64_t d0 = 0; d0 < pairs; d0 += 16) {
      const int64_t valid = pairs - d0;
      const __mmask16 mask = FirstLanes(valid);
      __m512i r[16];
      for (int64_t j = 0; j < 16; ++j) {
        r[j] = j < rows ? _mm512_maskz_loadu_epi32(mask, keys + (g * 16 + j) * stride + 2 * d0)
                        : _mm512_setzero_si512();
      }
      Transpose16x16(r);
      for (int64_t k = 0; k < 16 && k < valid; ++k) {
        _mm512_storeu_si512(out + (d0 + k) * 16, r[k]);
      }
    }
  }
}

void PackValues(const uint16_t* values, int64_t n, int64_t stride, int head_dim, uint32_t* packed) {
  alignas(64) static constexpr uint16_t kLow[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                    37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                    11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21,
                                                     53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58,
                                                     27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i low = _mm512_load_si512(kLow);
  const __m512i high = _mm512_load_si512(kHigh);
  for (int64_t r = 0; 2 * r < n; ++r) {
    const uint16_t* first = values + 2 * r * stride;
    const uint16_t* second = first + stride;
    const bool has_second = 2 * r + 1 < n;
    uint32_t* out = packed + r * head_dim;
    for (int c = 0; c < head_dim; c += 32) {
      const __mmask32 mask = head_dim - c >= 32 ? ~__mmask32{0} : (__mmask32{1} << 16) - 1u;
      const __m512i a = _mm512_maskz_loadu_epi16(mask, first + c);
      const __m512i b =
          has_second ? _mm512_maskz_loadu_epi16(mask, second + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + c, _mm512_permutex2var_epi16(a, low, b));
      if (head_dim - c >= 32)
        _mm512_storeu_si512(out + c + 16, _mm512_permutex2var_epi16(a, high, b));
    }
  }
}

void ScoreTile(const uint16_t* q, int64_t count, const uint32_t* packed_keys, int head_dim,
               const int64_t* limit, float* scores, int64_t ld) {
  int64_t t = 0;
  for (; t + kQueries <= count; t += kQueries) {
    const int64_t groups = (limit[t + kQueries - 1] + 15) / 16;
    ScoreQueries<kQueries>(q + t * head_dim, packed_keys, head_dim, groups, scores + t * ld, ld);
  }
  for (; t < count; ++t) {
    ScoreQueries<1>(q + t * head_dim, packed_keys, head_dim, (limit[t] + 15) / 16, scores + t * ld,
                    ld);
  }
}

void RoundWeights(const float* p, int64_t ld, int64_t count, int64_t n, uint32_t* out,
                  int64_t out_ld) {
  for (int64_t t = 0; t < count; ++t) {
    const float* row = p + t * ld;
    uint32_t* to = out + t * out_ld;
    for (int64_t j = 0; j < n; j += 32) {
      const __m512 a = _mm512_maskz_loadu_ps(FirstLanes(n - j), row + j);
      const __m512 b = n - j > 16 ? _mm512_maskz_loadu_ps(FirstLanes(n - j - 16), row + j + 16)
                                  : _mm512_setzero_ps();
      const __m512bh pairs = _mm512_cvtne2ps_pbh(b, a);
      _mm512_storeu_si512(to + j / 2, reinterpret_cast<const __m512i&>(pairs));
    }
  }
}

void AccumulateTile(const uint32_t* p, int64_t p_ld, int64_t count, const uint32_t* packed_values,
                    int head_dim, const int64_t* limit, const float* rescale, float* out) {
  int64_t t = 0;
  for (; t + kQueries <= count; t += kQueries) {
    const int64_t row_pairs = (limit[t + kQueries - 1] + 1) / 2;
    PvQueries<kQueries>(p + t * p_ld, p_ld, packed_values, head_dim, row_pairs, rescale + t,
                        out + t * head_dim);
  }
  for (; t < count; ++t) {
    PvQueries<1>(p + t * p_ld, p_ld, packed_values, head_dim, (limit[t] + 1) / 2, rescale + t,
                 out + t * head_dim);
  }
}

}  // namespace abcd::softmax_bf16
