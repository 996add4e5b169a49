#include "engine/attention/softmax_read.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/matmul.h"
#include "engine/ops/matmul_kernels.h"
#include "engine/ops/packed_matrix.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

// Rows per pass of a read: every head's scores of the block, and the block's values stay in
// L1/L2 from the keys' pass to the values' pass (64 rows of four 64-wide bf16 heads: 32 KiB of
// keys and of values).
constexpr int64_t kRowChunk = 64;
// Cached rows per block of a causal run's matrix products: 64 KiB of fp32 keys (and values),
// widened once and multiplied by every query of the run.
constexpr int64_t kBlockFloats = 16384;
constexpr int64_t kMaxBlockRows = 256;
// Rows ahead of the one being read whose keys the kernels ask the memory system for (and the
// values of the row being read, for the values' pass). Without it every row waits for DRAM
// where the cache is larger than L3; 16 and 32 measured alike, 8 slower.
constexpr int64_t kPrefetchRows = 16;

// Every helper below is inlined into the kernels that use it, always: a helper left out of line
// is compiled for the baseline ISA, not the calling clone's (ABCD_VECTOR_CLONES), which made it
// slower and changed its rounding (no FMA), so the same values read from two formats, or by two
// paths, could give different bits.
#define ABCD_INLINE [[gnu::always_inline]] inline

ABCD_INLINE float Load(const float* p, int64_t i) { return p[i]; }
ABCD_INLINE float Load(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
ABCD_INLINE float Load(const F16* p, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, p + i, sizeof(bits));
  return HalfToFloatValue(bits);
}

// Eight floats as one value (GCC/Clang vector extension): compiled per clone of the functions
// that use it (one AVX register on x86-64-v3/v4, two SSE registers on the baseline).
using Float8 = float __attribute__((vector_size(32)));
using U16x8 = uint16_t __attribute__((vector_size(16)));
using U32x8 = uint32_t __attribute__((vector_size(32)));

// By reference: a vector passed by value changes the ABI between the clones (-Wpsabi).
ABCD_INLINE void Load8(const float* p, Float8& v) { std::memcpy(&v, p, sizeof(v)); }
// Eight bf16 values widened to fp32 (zero-extend and shift: exact).
ABCD_INLINE void Load8(const uint16_t* p, Float8& v) {
  U16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 w = __builtin_convertvector(h, U32x8) << 16;
  std::memcpy(&v, &w, sizeof(v));
}
// Eight f16 values widened to fp32, exactly, in plain vector arithmetic (the same code in every
// clone): the exponent and mantissa moved to fp32's positions and scaled by 2^112, exact for
// normal and subnormal halves alike; infinities and NaNs (exponent 31) get fp32's all-ones
// exponent; then the sign. GCC 12's _Float16 vector conversion was 2x slower in the AVX2 clone
// (it converted element by element), and clang 14 has no _Float16 on x86.
ABCD_INLINE void Load8(const F16* p, Float8& v) {
  U16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 w = __builtin_convertvector(h, U32x8);
  const U32x8 magnitude = (w & 0x7FFFu) << 13;
  Float8 scaled;
  std::memcpy(&scaled, &magnitude, sizeof(scaled));
  scaled *= 0x1p112f;
  U32x8 bits;
  std::memcpy(&bits, &scaled, sizeof(bits));
  const U32x8 special = reinterpret_cast<U32x8>((w & 0x7C00u) == 0x7C00u);
  bits |= (special & 0x7F800000u) | ((w & 0x8000u) << 16);
  std::memcpy(&v, &bits, sizeof(v));
}
ABCD_INLINE void Store8(const Float8& v, float* p) { std::memcpy(p, &v, sizeof(v)); }

#if ABCD_HAS_VECTOR_CLONES
// f16 rows on a CPU with F16C: the same bits as F16, widened eight at a time by one vcvtph2ps
// (exact, as the portable widening is), 2.3x faster where the rows are in cache. The kernels over
// F16c rows are compiled for AVX2 + FMA + F16C alone (their specialisations below) and run only
// where the CPU has them (UseF16c). The instruction is written as assembly because GCC will not
// inline its intrinsic into the shared helpers (Dot, AccumulateColumns), which have no target of
// their own.
struct F16c {
  uint16_t bits;
};
ABCD_INLINE float Load(const F16c* p, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, p + i, sizeof(bits));
  return HalfToFloatValue(bits);
}
ABCD_INLINE void Load8(const F16c* p, Float8& v) {
  asm("vcvtph2ps %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const uint16_t(*)[8]>(p)));
}

// The CPU runs the F16c kernels: AVX2, FMA and F16C (what ABCD_F16C_TARGET compiles for).
bool UseF16c() {
  static const bool use = cpu::kernels::CpuRunsAvx2Kernels();
  return use;
}
#endif

// The lanes added in Sum4x8's order, so a sum of one vector and of four agree bitwise.
ABCD_INLINE float Sum8(const Float8& v) {
  return ((v[0] + v[2]) + (v[1] + v[3])) + ((v[4] + v[6]) + (v[5] + v[7]));
}

// sums[j] = the eight lanes of a_j added, for four vectors at once (two rounds of shuffles
// and adds, then the two 128-bit halves).
ABCD_INLINE void Sum4x8(const Float8& a0, const Float8& a1, const Float8& a2, const Float8& a3,
                        float* sums) {
  const Float8 t01 = __builtin_shufflevector(a0, a1, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(a0, a1, 2, 10, 3, 11, 6, 14, 7, 15);
  const Float8 t23 = __builtin_shufflevector(a2, a3, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(a2, a3, 2, 10, 3, 11, 6, 14, 7, 15);
  const Float8 u = __builtin_shufflevector(t01, t23, 0, 1, 8, 9, 4, 5, 12, 13) +
                   __builtin_shufflevector(t01, t23, 2, 3, 10, 11, 6, 7, 14, 15);
  // u: the low-half sums of a0..a3, then their high-half sums.
  for (int j = 0; j < 4; ++j) sums[j] = u[j] + u[j + 4];
}

// bf16 rows in "pair order": sixteen bf16 values as one 32-byte load, split into the even
// columns (the low halves of its 32-bit words, shifted up) and the odd ones (the high halves,
// masked): two single-uop ops, where widening eight at a time takes a shuffle per half. The
// query and the output of such a read are kept permuted the same way (PairOrder).
ABCD_INLINE void LoadPairs(const uint16_t* p, Float8& even, Float8& odd) {
  U32x8 w;
  std::memcpy(&w, p, sizeof(w));
  const U32x8 lo = w << 16;
  const U32x8 hi = w & 0xFFFF0000u;
  std::memcpy(&even, &lo, sizeof(even));
  std::memcpy(&odd, &hi, sizeof(odd));
}

// Columns 16b + 2j -> 16b + j and 16b + 2j + 1 -> 16b + 8 + j (head_dim % 16 == 0), and back.
void ToPairOrder(const float* x, int head_dim, float* out) {
  for (int b = 0; b < head_dim; b += 16) {
    for (int j = 0; j < 8; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 8 + j] = x[b + 2 * j + 1];
    }
  }
}
void FromPairOrder(const float* x, int head_dim, float* out) {
  for (int b = 0; b < head_dim; b += 16) {
    for (int j = 0; j < 8; ++j) {
      out[b + 2 * j] = x[b + j];
      out[b + 2 * j + 1] = x[b + 8 + j];
    }
  }
}

// max(start, x[0], ..., x[n - 1]) and x[0] + ... + x[n - 1], eight lanes at a time (the
// compiler vectorises neither reduction by itself without fast-math).
ABCD_VECTOR_CLONES float MaxOf(const float* x, int64_t n, float start) {
  Float8 m = {start, start, start, start, start, start, start, start};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Float8 v;
    Load8(x + i, v);
    m = m > v ? m : v;
  }
  float best = std::max(std::max(std::max(m[0], m[1]), std::max(m[2], m[3])),
                        std::max(std::max(m[4], m[5]), std::max(m[6], m[7])));
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

ABCD_VECTOR_CLONES float SumOf(const float* x, int64_t n) {
  Float8 a = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Float8 v;
    Load8(x + i, v);
    a += v;
  }
  float sum = Sum8(a);
  for (; i < n; ++i) sum += x[i];
  return sum;
}

template <typename T>
ABCD_INLINE void Prefetch(const T* row, int head_dim) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int c = 0; c < head_dim; c += kPerLine) __builtin_prefetch(row + c);
}

// q . key for one row: two vectors of partial sums (kPairs: the even and the odd columns; else
// columns c mod 16 < 8 and >= 8), added lane-wise and then across lanes. kPairs (bf16,
// head_dim % 16 == 0): q and the row in pair order.
template <typename T, bool kPairs>
ABCD_INLINE float Dot(const float* q, const T* key, int head_dim) {
  Float8 a = {}, b = {};
  int c = 0;
  for (; c + 16 <= head_dim; c += 16) {
    Float8 q0, q1, x0, x1;
    Load8(q + c, q0);
    Load8(q + c + 8, q1);
    if constexpr (kPairs) {
      LoadPairs(key + c, x0, x1);
    } else {
      Load8(key + c, x0);
      Load8(key + c + 8, x1);
    }
    a += q0 * x0;
    b += q1 * x1;
  }
  if constexpr (!kPairs) {
    for (; c + 8 <= head_dim; c += 8) {
      Float8 qc, x;
      Load8(q + c, qc);
      Load8(key + c, x);
      a += qc * x;
    }
  }
  float score = Sum8(a + b);
  // std::fma: the same rounding whether or not the compiler contracts, as in Dot4.
  for (; c < head_dim; ++c) score = std::fma(q[c], Load(key, c), score);
  return score;
}

// sums[0..3] = q . the four rows k0, k0 + stride, ... (one head), each the same bits as Dot on
// that row (the same partial sums, added in the same order), the four rows sharing each load of q.
template <typename T, bool kPairs>
ABCD_INLINE void Dot4(const float* q, const T* k0, int64_t stride, int head_dim, float* sums) {
  const T* k[4] = {k0, k0 + stride, k0 + 2 * stride, k0 + 3 * stride};
  Float8 a[4] = {}, b[4] = {};
  int c = 0;
  for (; c + 16 <= head_dim; c += 16) {
    Float8 q0, q1;
    Load8(q + c, q0);
    Load8(q + c + 8, q1);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      Float8 x0, x1;
      if constexpr (kPairs) {
        LoadPairs(k[r] + c, x0, x1);
      } else {
        Load8(k[r] + c, x0);
        Load8(k[r] + c + 8, x1);
      }
      a[r] += q0 * x0;
      b[r] += q1 * x1;
    }
  }
  if constexpr (!kPairs) {
    for (; c + 8 <= head_dim; c += 8) {
      Float8 qc;
      Load8(q + c, qc);
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        Float8 x;
        Load8(k[r] + c, x);
        a[r] += qc * x;
      }
    }
  }
  Sum4x8(a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], sums);
  for (; c < head_dim; ++c) {
    for (int r = 0; r < 4; ++r) sums[r] = std::fma(q[c], Load(k[r], c), sums[r]);
  }
}

// scores[h * n + i] = q_h . keys[i] (head h's key columns) for `n` rows `stride` apart and
// every query head h of `kv_heads` x `group` (q_h at q + h * head_dim). The rows are walked in
// order, every head of a row before the next row, so memory is read front to back (reading one
// head's columns of four rows at a time instead was 1.3x slower beyond L3); a single head reads
// four rows at a time (Dot4: a quarter faster on abc's few slots). Keys kPrefetchRows rows ahead
// (among the `ahead_rows` from `keys` on) are prefetched, and each row's values as its keys are
// read, for the pass that follows this one.
template <typename T, bool kPairs>
ABCD_INLINE void ScoreRowsIn(const float* q, int kv_heads, int group, const T* keys,
                             const T* values, int64_t n, int64_t ahead_rows, int64_t stride,
                             int head_dim, float* scores) {
  const int heads = kv_heads * group;
  const int width = kv_heads * head_dim;
  int64_t i = 0;
  if (heads == 1) {
    for (; i + 4 <= n; i += 4) {
      for (int64_t j = i; j < i + 4; ++j) {
        if (j + kPrefetchRows < ahead_rows) Prefetch(keys + (j + kPrefetchRows) * stride, width);
        Prefetch(values + j * stride, width);
      }
      Dot4<T, kPairs>(q, keys + i * stride, stride, head_dim, scores + i);
    }
  }
  for (; i < n; ++i) {
    const T* row = keys + i * stride;
    if (i + kPrefetchRows < ahead_rows) Prefetch(row + kPrefetchRows * stride, width);
    Prefetch(values + i * stride, width);
    for (int h = 0; h < heads; ++h) {
      scores[int64_t{h} * n + i] =
          Dot<T, kPairs>(q + int64_t{h} * head_dim, row + int64_t{h / group} * head_dim, head_dim);
    }
  }
}
template <typename T, bool kPairs>
ABCD_VECTOR_CLONES void ScoreRows(const float* q, int kv_heads, int group, const T* keys,
                                  const T* values, int64_t n, int64_t ahead_rows, int64_t stride,
                                  int head_dim, float* scores) {
  ScoreRowsIn<T, kPairs>(q, kv_heads, group, keys, values, n, ahead_rows, stride, head_dim, scores);
}
#if ABCD_HAS_VECTOR_CLONES
template <>
ABCD_F16C_TARGET void ScoreRows<F16c, false>(const float* q, int kv_heads, int group,
                                             const F16c* keys, const F16c* values, int64_t n,
                                             int64_t ahead_rows, int64_t stride, int head_dim,
                                             float* scores) {
  ScoreRowsIn<F16c, false>(q, kv_heads, group, keys, values, n, ahead_rows, stride, head_dim,
                           scores);
}
#endif

// out[c0 .. c0 + 8V) = out * rescale + sum_i weights[i] values[i][c0 ..], the V vectors of the
// output held in registers over all rows.
// kPairs: the rows and out in pair order, V even.
template <int V, bool kPairs, typename T>
ABCD_INLINE void AccumulateColumns(const float* weights, const T* values, int64_t count,
                                   int64_t stride, int c0, float rescale, float* out) {
  Float8 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    Load8(out + c0 + 8 * v, acc[v]);
    acc[v] *= rescale;
  }
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* row = values + i * stride + c0;
    if constexpr (kPairs) {
#pragma GCC unroll 8
      for (int v = 0; v < V; v += 2) {
        Float8 e, o;
        LoadPairs(row + 8 * v, e, o);
        acc[v] += w * e;
        acc[v + 1] += w * o;
      }
    } else {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) {
        Float8 x;
        Load8(row + 8 * v, x);
        acc[v] += w * x;
      }
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) Store8(acc[v], out + c0 + 8 * v);
}

// out = out * rescale + sum_i weights[i] values[i] over `count` rows `stride` apart (kPairs:
// rows and out in pair order, head_dim % 16 == 0).
template <typename T, bool kPairs>
ABCD_INLINE void AccumulateIn(const float* weights, const T* values, int64_t count, int64_t stride,
                              int head_dim, float rescale, float* out) {
  int c = 0;
  for (; c + 64 <= head_dim; c += 64) {
    AccumulateColumns<8, kPairs>(weights, values, count, stride, c, rescale, out);
  }
  for (; c + 32 <= head_dim; c += 32) {
    AccumulateColumns<4, kPairs>(weights, values, count, stride, c, rescale, out);
  }
  if constexpr (kPairs) {
    for (; c + 16 <= head_dim; c += 16) {
      AccumulateColumns<2, true>(weights, values, count, stride, c, rescale, out);
    }
    return;
  }
  for (; c + 8 <= head_dim; c += 8) {
    AccumulateColumns<1, false>(weights, values, count, stride, c, rescale, out);
  }
  for (; c < head_dim; ++c) {
    float sum = out[c] * rescale;
    for (int64_t i = 0; i < count; ++i) sum += weights[i] * Load(values + i * stride, c);
    out[c] = sum;
  }
}
template <typename T, bool kPairs>
ABCD_VECTOR_CLONES void Accumulate(const float* weights, const T* values, int64_t count,
                                   int64_t stride, int head_dim, float rescale, float* out) {
  AccumulateIn<T, kPairs>(weights, values, count, stride, head_dim, rescale, out);
}
#if ABCD_HAS_VECTOR_CLONES
template <>
ABCD_F16C_TARGET void Accumulate<F16c, false>(const float* weights, const F16c* values,
                                              int64_t count, int64_t stride, int head_dim,
                                              float rescale, float* out) {
  AccumulateIn<F16c, false>(weights, values, count, stride, head_dim, rescale, out);
}
#endif

// Advances a running softmax by one block of scores: row[0, seen) are scores, row[seen, n) are
// masked (-infinity, or ignored). Afterwards row[0, n) holds exp(score - the new maximum) (0 where
// masked) and `run` the new maximum and sum; returns the factor by which the block's earlier
// output must be rescaled (0 on the first block).
float AdvanceRun(float* row, int64_t n, int64_t seen, SoftmaxPartial& run) {
  const float block_max = MaxOf(row, seen, run.max);
  const float rescale = std::exp(run.max - block_max);
  for (int64_t j = 0; j < n; ++j) row[j] -= block_max;
  cpu::ExpArray(row, n, row);
  run.sum = run.sum * rescale + SumOf(row, seen);
  run.max = block_max;
  return rescale;
}

// Rows [begin, end) of `kv_heads` key/value heads (head h's columns at h * head_dim of each
// row; its `group` query heads at q + (h * group + j) * head_dim, outputs alike), read straight
// from the cache (bf16 widened in registers) in blocks of kRowChunk rows: every head's scores
// of a block in one walk over its keys in row order (ScoreRows, which also prefetches the
// block's values), then per head the running softmax advanced and the weighted values added.
// Reading the keys front to back, rather than one head's columns of the block's rows and then
// the next head's, keeps the memory system streaming: the read alone is about 2x faster once the
// cache is larger than L3 (loadtest/results/README.md). kPairs: q and out in pair order.
template <bool kPairs, typename T>
void ReadRangeIn(const float* q, int kv_heads, int group, const T* keys, const T* values,
                 const float* bias, int64_t begin, int64_t end, int64_t stride, int head_dim,
                 SoftmaxPartial* partial, float* out) {
  const int heads = kv_heads * group;
  std::fill(out, out + int64_t{heads} * head_dim, 0.0f);
  std::fill(partial, partial + heads, SoftmaxPartial{});
  absl::InlinedVector<float, 16 * kRowChunk> scores(static_cast<size_t>(heads * kRowChunk));
  for (int64_t first = begin; first < end; first += kRowChunk) {
    const int64_t n = std::min(kRowChunk, end - first);
    const T* k = keys + first * stride;
    const T* v = values + first * stride;
    ScoreRows<T, kPairs>(q, kv_heads, group, k, v, n, end - first, stride, head_dim, scores.data());
    for (int h = 0; h < heads; ++h) {
      float* row = scores.data() + int64_t{h} * n;
      if (bias != nullptr) {
        for (int64_t i = 0; i < n; ++i) row[i] += bias[first + i];
      }
      const float rescale = AdvanceRun(row, n, n, partial[h]);
      const int64_t at = int64_t{h} * head_dim;
      Accumulate<T, kPairs>(row, v + int64_t{h / group} * head_dim, n, stride, head_dim, rescale,
                            out + at);
    }
  }
}

// ReadRangeIn with q and out in column order: bf16 rows of a head_dim that is a multiple of 16
// are read in pair order (the query permuted in, the output back).
template <typename T>
void ReadRange(const float* q, int kv_heads, int group, const T* keys, const T* values,
               const float* bias, int64_t begin, int64_t end, int64_t stride, int head_dim,
               SoftmaxPartial* partial, float* out) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (head_dim % 16 == 0) {
      const int heads = kv_heads * group;
      const int64_t width = int64_t{heads} * head_dim;
      absl::InlinedVector<float, 1024> permuted(static_cast<size_t>(2 * width));
      float* q_pairs = permuted.data();
      float* out_pairs = q_pairs + width;
      for (int h = 0; h < heads; ++h) {
        ToPairOrder(q + h * head_dim, head_dim, q_pairs + h * head_dim);
      }
      ReadRangeIn<true>(q_pairs, kv_heads, group, keys, values, bias, begin, end, stride, head_dim,
                        partial, out_pairs);
      for (int h = 0; h < heads; ++h) {
        FromPairOrder(out_pairs + h * head_dim, head_dim, out + h * head_dim);
      }
      return;
    }
  }
  ReadRangeIn<false>(q, kv_heads, group, keys, values, bias, begin, end, stride, head_dim, partial,
                     out);
}

template <typename T>
void ReadGroup(const float* q, int group, const T* keys, const T* values, const float* bias,
               int64_t count, int64_t stride, int head_dim, float* out) {
  if (count == 0) {
    std::fill(out, out + int64_t{group} * head_dim, 0.0f);
    return;
  }
  absl::InlinedVector<SoftmaxPartial, 8> partial(static_cast<size_t>(group));
  ReadRange(q, 1, group, keys, values, bias, 0, count, stride, head_dim, partial.data(), out);
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / partial[static_cast<size_t>(g)].sum;
    float* o = out + int64_t{g} * head_dim;
    for (int c = 0; c < head_dim; ++c) o[c] *= inv;
  }
}

// Copies `count` rows `stride` apart to contiguous fp32 rows of head_dim (bf16 widened).
template <typename T>
ABCD_INLINE void StageIn(const T* rows, int64_t count, int64_t stride, int head_dim, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const T* row = rows + i * stride;
    if (i + kPrefetchRows < count) Prefetch(row + kPrefetchRows * stride, head_dim);
    float* to = out + i * head_dim;
    int c = 0;
    for (; c + 8 <= head_dim; c += 8) {
      Float8 x;
      Load8(row + c, x);
      Store8(x, to + c);
    }
    for (; c < head_dim; ++c) to[c] = Load(row, c);
  }
}
template <typename T>
ABCD_VECTOR_CLONES void Stage(const T* rows, int64_t count, int64_t stride, int head_dim,
                              float* out) {
  StageIn(rows, count, stride, head_dim, out);
}
#if ABCD_HAS_VECTOR_CLONES
template <>
ABCD_F16C_TARGET void Stage<F16c>(const F16c* rows, int64_t count, int64_t stride, int head_dim,
                                  float* out) {
  StageIn(rows, count, stride, head_dim, out);
}
#endif

// The causal run as matrix products, per query head: for each block of `block` cached rows,
// S = Q K_block^T over the queries that reach the block (Linear on the block packed as a
// weight matrix), the rows beyond each query's position masked, the running softmax of each
// query advanced, and out += P V_block (V_block^T packed). The products run at the matrix
// kernels' speed, where a query at a time is bound by loads.
template <typename T>
void CausalRun(const float* q, int64_t q_stride, int group, const T* keys, const T* values,
               int64_t first_position, int64_t rows, int64_t stride, int head_dim, float* out,
               int64_t out_stride) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const int64_t block = std::clamp<int64_t>(kBlockFloats / head_dim, 16, kMaxBlockRows);
  const int64_t total = first_position + rows;  // rows the last query reads
  const size_t d = static_cast<size_t>(head_dim);
  // The group's query heads are rows of the same products: query row i * group + g is head g
  // of run row i, so each block is widened and packed once for the whole group, and the
  // queries that reach a block are one contiguous range.
  const int64_t queries_count = rows * group;
  std::vector<float> staged(static_cast<size_t>(block) * d), transposed(staged.size());
  std::vector<float> queries(static_cast<size_t>(queries_count) * d), acc(queries.size());
  std::vector<float> scores(static_cast<size_t>(queries_count * block)), product(queries.size());
  std::vector<SoftmaxPartial> runs(static_cast<size_t>(queries_count));
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(q + i * q_stride, group * d, queries.data() + i * group * head_dim);
  }
  for (int64_t first = 0; first < total; first += block) {
    const int64_t n = std::min(block, total - first);
    const int64_t active = std::max<int64_t>(0, first - first_position);  // first row here
    const int64_t m = (rows - active) * group;
    Stage(keys + first * stride, n, stride, head_dim, staged.data());
    const PackedMatrix k =
        PackedMatrix::Pack(std::span<const float>(staged.data(), static_cast<size_t>(n) * d), n,
                           head_dim, WeightFormat::kF32);
    cpu::Linear(queries.data() + active * group * head_dim, m, k, nullptr, scores.data(), nullptr);
    Stage(values + first * stride, n, stride, head_dim, staged.data());
    for (int64_t j = 0; j < n; ++j) {
      for (int c = 0; c < head_dim; ++c) transposed[c * n + j] = staged[j * d + c];
    }
    const PackedMatrix v =
        PackedMatrix::Pack(std::span<const float>(transposed.data(), static_cast<size_t>(n) * d),
                           head_dim, n, WeightFormat::kF32);
    for (int64_t t = 0; t < m; ++t) {
      float* row = scores.data() + t * n;
      const int64_t i = active + t / group;  // the run row of this query
      const int64_t seen = std::min(n, first_position + i + 1 - first);
      std::fill(row + seen, row + n, kMasked);
      const float rescale = AdvanceRun(row, n, seen, runs[static_cast<size_t>(active * group + t)]);
      float* o = acc.data() + (active * group + t) * head_dim;
      for (int c = 0; c < head_dim; ++c) o[c] *= rescale;
    }
    cpu::Linear(scores.data(), m, v, nullptr, product.data(), nullptr);
    float* a = acc.data() + active * group * head_dim;
    for (int64_t x = 0; x < m * head_dim; ++x) a[x] += product[x];
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int g = 0; g < group; ++g) {
      const int64_t query = i * group + g;
      const float inv = 1.0f / runs[static_cast<size_t>(query)].sum;
      float* o = out + i * out_stride + int64_t{g} * head_dim;
      for (int c = 0; c < head_dim; ++c) o[c] = acc[query * head_dim + c] * inv;
    }
  }
}

// f16 rows go to the F16c kernels where the CPU runs them (unless `portable`): read(keys,
// values) is called with the rows as F16c or as F16, the same bits.
template <typename Read>
void ReadF16(const F16* keys, const F16* values, bool portable, const Read& read) {
#if ABCD_HAS_VECTOR_CLONES
  if (!portable && UseF16c()) {
    read(reinterpret_cast<const F16c*>(keys), reinterpret_cast<const F16c*>(values));
    return;
  }
#endif
  read(keys, values);
}

}  // namespace

void SoftmaxReadHead(const float* q, const float* keys, const float* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const float* keys, const float* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values,
                     const float* bias, int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxReadGroup(const float* q, int group, const float* keys, const float* values,
                      int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, group, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadGroup(const float* q, int group, const uint16_t* keys, const uint16_t* values,
                      int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, group, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadPartial(const float* q, int kv_heads, int group, const float* keys,
                        const float* values, int64_t begin, int64_t end, int64_t stride,
                        int head_dim, SoftmaxPartial* partial, float* out) {
  ReadRange(q, kv_heads, group, keys, values, nullptr, begin, end, stride, head_dim, partial, out);
}

void SoftmaxReadPartial(const float* q, int kv_heads, int group, const uint16_t* keys,
                        const uint16_t* values, int64_t begin, int64_t end, int64_t stride,
                        int head_dim, SoftmaxPartial* partial, float* out) {
  ReadRange(q, kv_heads, group, keys, values, nullptr, begin, end, stride, head_dim, partial, out);
}

void SoftmaxMerge(const SoftmaxPartial* partials, int64_t partial_stride, const float* outs,
                  int64_t out_stride, int pieces, int head_dim, float* out) {
  float max = partials[0].max;
  for (int i = 1; i < pieces; ++i) max = std::max(max, partials[i * partial_stride].max);
  float sum = 0.0f;
  std::fill(out, out + head_dim, 0.0f);
  for (int i = 0; i < pieces; ++i) {
    const SoftmaxPartial& p = partials[i * partial_stride];
    const float scale = std::exp(p.max - max);
    sum += p.sum * scale;
    const float* o = outs + i * out_stride;
    for (int c = 0; c < head_dim; ++c) out[c] += scale * o[c];
  }
  const float inv = 1.0f / sum;
  for (int c = 0; c < head_dim; ++c) out[c] *= inv;
}

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const float* keys,
                          const float* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride) {
  CausalRun(q, q_stride, group, keys, values, first_position, rows, stride, head_dim, out,
            out_stride);
}

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const uint16_t* keys,
                          const uint16_t* values, int64_t first_position, int64_t rows,
                          int64_t stride, int head_dim, float* out, int64_t out_stride) {
  CausalRun(q, q_stride, group, keys, values, first_position, rows, stride, head_dim, out,
            out_stride);
}

void SoftmaxReadHead(const float* q, const F16* keys, const F16* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    ReadGroup(q, 1, k, v, nullptr, count, stride, head_dim, out);
  });
}

void SoftmaxReadHead(const float* q, const F16* keys, const F16* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    ReadGroup(q, 1, k, v, bias, count, stride, head_dim, out);
  });
}

void SoftmaxReadGroup(const float* q, int group, const F16* keys, const F16* values, int64_t count,
                      int64_t stride, int head_dim, float* out) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    ReadGroup(q, group, k, v, nullptr, count, stride, head_dim, out);
  });
}

void SoftmaxReadPartial(const float* q, int kv_heads, int group, const F16* keys, const F16* values,
                        int64_t begin, int64_t end, int64_t stride, int head_dim,
                        SoftmaxPartial* partial, float* out) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    ReadRange(q, kv_heads, group, k, v, nullptr, begin, end, stride, head_dim, partial, out);
  });
}

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const F16* keys,
                          const F16* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    CausalRun(q, q_stride, group, k, v, first_position, rows, stride, head_dim, out, out_stride);
  });
}

bool SoftmaxReadsF16WithF16c() {
#if ABCD_HAS_VECTOR_CLONES
  return UseF16c();
#else
  return false;
#endif
}

void SoftmaxReadHeadWidenedPortably(const float* q, const F16* keys, const F16* values,
                                    int64_t count, int64_t stride, int head_dim, float* out) {
  ReadF16(keys, values, true, [&](const auto* k, const auto* v) {
    ReadGroup(q, 1, k, v, nullptr, count, stride, head_dim, out);
  });
}

}  // namespace abcd
