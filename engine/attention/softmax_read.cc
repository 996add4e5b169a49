#include "engine/attention/softmax_read.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "engine/attention/softmax_kernels.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

using namespace softmax_internal;  // NOLINT(build/namespaces): the kernels' own helpers

// Rows per pass of a read: every head's scores of the block, and the block's values stay in
// L1/L2 from the keys' pass to the values' pass (64 rows of four 64-wide bf16 heads: 32 KiB of
// keys and of values).
constexpr int64_t kRowChunk = 64;

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

// Sixteen floats as one value (one AVX-512 register in the x86-64-v4 clone, two AVX or four SSE
// registers in the others): the same per-lane arithmetic as Float8's in half the instructions
// where the CPU has AVX-512 (DotHeads, AccumulateWideColumns).
using F32x16 = float __attribute__((vector_size(64)));
using U32x16 = uint32_t __attribute__((vector_size(64)));

// sums[j] = q_j . key for the G (2 or 4) query heads q_j = q + j * head_dim of one key head,
// each the same bits as Dot on that head: Dot's two vectors of partial sums are the low and high
// halves of one sixteen-lane sum here (the same products added in the same order), then added and
// summed across lanes as Dot does; the key's columns are loaded and widened once for all G heads.
template <typename T, bool kPairs, int G>
ABCD_INLINE void DotHeads(const float* q, const T* key, int head_dim, float* sums) {
  static_assert(G == 2 || G == 4);
  F32x16 acc[G] = {};
  int c = 0;
  for (; c + 16 <= head_dim; c += 16) {
    Float8 x0, x1;
    if constexpr (kPairs) {
      LoadPairs(key + c, x0, x1);
    } else {
      Load8(key + c, x0);
      Load8(key + c + 8, x1);
    }
    const F32x16 x =
        __builtin_shufflevector(x0, x1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
    for (int j = 0; j < G; ++j) {
      F32x16 qv;
      std::memcpy(&qv, q + j * head_dim + c, sizeof(qv));
      acc[j] += qv * x;
    }
  }
  Float8 a[G], b[G];
#pragma GCC unroll 4
  for (int j = 0; j < G; ++j) {
    a[j] = __builtin_shufflevector(acc[j], acc[j], 0, 1, 2, 3, 4, 5, 6, 7);
    b[j] = __builtin_shufflevector(acc[j], acc[j], 8, 9, 10, 11, 12, 13, 14, 15);
  }
  if constexpr (!kPairs) {
    for (; c + 8 <= head_dim; c += 8) {
      Float8 x;
      Load8(key + c, x);
#pragma GCC unroll 4
      for (int j = 0; j < G; ++j) {
        Float8 qc;
        Load8(q + j * head_dim + c, qc);
        a[j] += qc * x;
      }
    }
  }
  if constexpr (G == 4) {
    Sum4x8(a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], sums);
  } else {
    sums[0] = Sum8(a[0] + b[0]);
    sums[1] = Sum8(a[1] + b[1]);
  }
  for (; c < head_dim; ++c) {
    const float k = Load(key, c);
    for (int j = 0; j < G; ++j) sums[j] = std::fma(q[j * head_dim + c], k, sums[j]);
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
  // GQA: the query heads of a key head read its columns in fours or twos (DotHeads), the same
  // bits as one at a time.
  const int shared = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  for (; i < n; ++i) {
    const T* row = keys + i * stride;
    if (i + kPrefetchRows < ahead_rows) Prefetch(row + kPrefetchRows * stride, width);
    Prefetch(values + i * stride, width);
    if (shared == 1) {
      for (int h = 0; h < heads; ++h) {
        scores[int64_t{h} * n + i] = Dot<T, kPairs>(q + int64_t{h} * head_dim,
                                                    row + int64_t{h / group} * head_dim, head_dim);
      }
      continue;
    }
    for (int h = 0; h < heads; h += shared) {
      float sums[4];
      const float* qh = q + int64_t{h} * head_dim;
      const T* key = row + int64_t{h / group} * head_dim;
      if (shared == 4) {
        DotHeads<T, kPairs, 4>(qh, key, head_dim, sums);
      } else {
        DotHeads<T, kPairs, 2>(qh, key, head_dim, sums);
      }
      for (int j = 0; j < shared; ++j) scores[int64_t{h + j} * n + i] = sums[j];
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

// AccumulateColumns over 32-column chunks with sixteen lanes a vector: columns [c0, c0 + 32 NC)
// of out = out * rescale + sum_i weights[i] values[i][..], each column's value the same bits as
// AccumulateColumns gives (the same multiply and add per column and row, in row order). kPairs:
// the rows and out in pair order; a 64-byte load of a row holds two 16-column pair blocks, its
// low halves the even columns of both and its high halves the odd ones, so the output is held
// in that lane order (evens of both blocks, odds of both) and put back in pair order at the end.
template <int NC, bool kPairs, typename T>
ABCD_INLINE void AccumulateWideColumns(const float* weights, const T* values, int64_t count,
                                       int64_t stride, int c0, float rescale, float* out) {
  F32x16 acc[2 * NC];
#pragma GCC unroll 8
  for (int k = 0; k < NC; ++k) {
    F32x16 first, second;  // out[c0 + 32k ..+16), out[c0 + 32k + 16 ..+16)
    std::memcpy(&first, out + c0 + 32 * k, sizeof(first));
    std::memcpy(&second, out + c0 + 32 * k + 16, sizeof(second));
    if constexpr (kPairs) {
      acc[2 * k] = __builtin_shufflevector(first, second, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                           20, 21, 22, 23);
      acc[2 * k + 1] = __builtin_shufflevector(first, second, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25,
                                               26, 27, 28, 29, 30, 31);
    } else {
      acc[2 * k] = first;
      acc[2 * k + 1] = second;
    }
    acc[2 * k] *= rescale;
    acc[2 * k + 1] *= rescale;
  }
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* row = values + i * stride + c0;
#pragma GCC unroll 8
    for (int k = 0; k < NC; ++k) {
      if constexpr (kPairs) {
        U32x16 bits;
        std::memcpy(&bits, row + 32 * k, sizeof(bits));
        const U32x16 lo = bits << 16;
        const U32x16 hi = bits & 0xFFFF0000u;
        F32x16 even, odd;
        std::memcpy(&even, &lo, sizeof(even));
        std::memcpy(&odd, &hi, sizeof(odd));
        acc[2 * k] += w * even;
        acc[2 * k + 1] += w * odd;
      } else {
        Float8 x[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) Load8(row + 32 * k + 8 * v, x[v]);
        acc[2 * k] += w * __builtin_shufflevector(x[0], x[1], 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                  12, 13, 14, 15);
        acc[2 * k + 1] += w * __builtin_shufflevector(x[2], x[3], 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                      11, 12, 13, 14, 15);
      }
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < NC; ++k) {
    F32x16 first = acc[2 * k], second = acc[2 * k + 1];
    if constexpr (kPairs) {
      first = __builtin_shufflevector(acc[2 * k], acc[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17,
                                      18, 19, 20, 21, 22, 23);
      second = __builtin_shufflevector(acc[2 * k], acc[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24,
                                       25, 26, 27, 28, 29, 30, 31);
    }
    std::memcpy(out + c0 + 32 * k, &first, sizeof(first));
    std::memcpy(out + c0 + 32 * k + 16, &second, sizeof(second));
  }
}

// out = out * rescale + sum_i weights[i] values[i] over `count` rows `stride` apart (kPairs:
// rows and out in pair order, head_dim % 16 == 0).
template <typename T, bool kPairs>
ABCD_INLINE void AccumulateIn(const float* weights, const T* values, int64_t count, int64_t stride,
                              int head_dim, float rescale, float* out) {
  int c = 0;
  for (; c + 64 <= head_dim; c += 64) {
    AccumulateWideColumns<2, kPairs>(weights, values, count, stride, c, rescale, out);
  }
  for (; c + 32 <= head_dim; c += 32) {
    AccumulateWideColumns<1, kPairs>(weights, values, count, stride, c, rescale, out);
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

}  // namespace

float softmax_internal::AdvanceRun(float* row, int64_t n, int64_t seen, SoftmaxPartial& run) {
  const float block_max = MaxOf(row, seen, run.max);
  const float rescale = std::exp(run.max - block_max);
  for (int64_t j = 0; j < n; ++j) row[j] -= block_max;
  cpu::ExpArray(row, n, row);
  run.sum = run.sum * rescale + SumOf(row, seen);
  run.max = block_max;
  return rescale;
}

namespace {

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
