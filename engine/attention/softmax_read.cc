#include "engine/attention/softmax_read.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

// Rows per pass of a read: their scores sit on the stack, and the rows stay in L1 while every
// query head of a group reads them (64 rows of a 128-wide bf16 head: 16 KiB of keys).
constexpr int64_t kRowChunk = 64;
// A staged block of keys (and one of values) for a causal run: 32 KiB each, widened to fp32
// once and read from L1/L2 by every query of the run.
constexpr int64_t kStagedFloats = 8192;
constexpr int64_t kMaxStagedRows = 256;
static_assert(kRowChunk <= kMaxStagedRows);
// Rows ahead of the one being read that the kernels ask the memory system for: a head's rows
// are short (head_dim values) and `stride` apart, a pattern the hardware prefetchers follow
// poorly across pages, so without it every row waits for DRAM.
constexpr int64_t kPrefetchRows = 8;

inline float Load(const float* p, int64_t i) { return p[i]; }
inline float Load(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Eight floats as one value (GCC/Clang vector extension): compiled per clone of the functions
// that use it (one AVX register on x86-64-v3/v4, two SSE registers on the baseline).
using Float8 = float __attribute__((vector_size(32)));
using U16x8 = uint16_t __attribute__((vector_size(16)));
using U32x8 = uint32_t __attribute__((vector_size(32)));

// By reference: a vector passed by value changes the ABI between the clones (-Wpsabi).
inline void Load8(const float* p, Float8& v) { std::memcpy(&v, p, sizeof(v)); }
// Eight bf16 values widened to fp32 (zero-extend and shift: exact).
inline void Load8(const uint16_t* p, Float8& v) {
  U16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 w = __builtin_convertvector(h, U32x8) << 16;
  std::memcpy(&v, &w, sizeof(v));
}
inline void Store8(const Float8& v, float* p) { std::memcpy(p, &v, sizeof(v)); }

inline float Sum8(const Float8& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

template <typename T>
inline void Prefetch(const T* row, int head_dim) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int c = 0; c < head_dim; c += kPerLine) __builtin_prefetch(row + c);
}

// scores[i] = q . keys[i] for `count` rows `stride` apart. Each dot product keeps eight
// independent partial sums (columns c = j mod 8 in lane j); four rows at a time share each load
// of q. With `prefetch` (the values of the same rows; null: no prefetching) the kernel asks for
// the keys kPrefetchRows ahead, within the `valid` rows that exist from `keys` on, and for the
// values of the rows it reads, which the pass after it needs.
template <typename T>
ABCD_VECTOR_CLONES void Scores(const float* q, const T* keys, const T* prefetch, int64_t count,
                               int64_t valid, int64_t stride, int head_dim, float* scores) {
  const int whole = head_dim - head_dim % 8;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    if (prefetch != nullptr) {
      for (int64_t j = i; j < i + 4; ++j) {
        if (j + kPrefetchRows < valid) Prefetch(keys + (j + kPrefetchRows) * stride, head_dim);
        Prefetch(prefetch + j * stride, head_dim);
      }
    }
    const T* k0 = keys + i * stride;
    const T* k1 = k0 + stride;
    const T* k2 = k1 + stride;
    const T* k3 = k2 + stride;
    Float8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int c = 0; c < whole; c += 8) {
      Float8 qc, x0, x1, x2, x3;
      Load8(q + c, qc);
      Load8(k0 + c, x0);
      Load8(k1 + c, x1);
      Load8(k2 + c, x2);
      Load8(k3 + c, x3);
      a0 += qc * x0;
      a1 += qc * x1;
      a2 += qc * x2;
      a3 += qc * x3;
    }
    float s0 = Sum8(a0), s1 = Sum8(a1), s2 = Sum8(a2), s3 = Sum8(a3);
    for (int c = whole; c < head_dim; ++c) {
      s0 += q[c] * Load(k0, c);
      s1 += q[c] * Load(k1, c);
      s2 += q[c] * Load(k2, c);
      s3 += q[c] * Load(k3, c);
    }
    scores[i] = s0;
    scores[i + 1] = s1;
    scores[i + 2] = s2;
    scores[i + 3] = s3;
  }
  for (; i < count; ++i) {
    const T* key = keys + i * stride;
    if (prefetch != nullptr) Prefetch(prefetch + i * stride, head_dim);
    Float8 a = {};
    for (int c = 0; c < whole; c += 8) {
      Float8 qc, x;
      Load8(q + c, qc);
      Load8(key + c, x);
      a += qc * x;
    }
    float score = Sum8(a);
    for (int c = whole; c < head_dim; ++c) score += q[c] * Load(key, c);
    scores[i] = score;
  }
}

// out[c0 .. c0 + 8V) = out * rescale + sum_i weights[i] values[i][c0 ..], the V vectors of the
// output held in registers over all rows.
template <int V, typename T>
inline void AccumulateColumns(const float* weights, const T* values, int64_t count, int64_t stride,
                              int c0, float rescale, float* out) {
  Float8 acc[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) {
    Load8(out + c0 + 8 * v, acc[v]);
    acc[v] *= rescale;
  }
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const T* row = values + i * stride + c0;
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      Float8 x;
      Load8(row + 8 * v, x);
      acc[v] += w * x;
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) Store8(acc[v], out + c0 + 8 * v);
}

// out = out * rescale + sum_i weights[i] values[i] over `count` rows `stride` apart.
template <typename T>
ABCD_VECTOR_CLONES void Accumulate(const float* weights, const T* values, int64_t count,
                                   int64_t stride, int head_dim, float rescale, float* out) {
  int c = 0;
  for (; c + 64 <= head_dim; c += 64) {
    AccumulateColumns<8>(weights, values, count, stride, c, rescale, out);
  }
  for (; c + 32 <= head_dim; c += 32) {
    AccumulateColumns<4>(weights, values, count, stride, c, rescale, out);
  }
  for (; c + 8 <= head_dim; c += 8) {
    AccumulateColumns<1>(weights, values, count, stride, c, rescale, out);
  }
  for (; c < head_dim; ++c) {
    float sum = out[c] * rescale;
    for (int64_t i = 0; i < count; ++i) sum += weights[i] * Load(values + i * stride, c);
    out[c] = sum;
  }
}

// One block of `n` rows folded into one query head's running read: scores (+ bias), a new
// maximum, the old sums rescaled to it, exp, and the weighted values added. `prefetch` and
// `valid` as for Scores.
template <typename T>
void Fold(const float* q, const T* keys, const T* values, const float* bias, int64_t n,
          int64_t stride, int head_dim, bool prefetch, int64_t valid, SoftmaxPartial& run,
          float* out) {
  float scores[kMaxStagedRows];
  Scores(q, keys, prefetch ? values : nullptr, n, valid, stride, head_dim, scores);
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) scores[i] += bias[i];
  }
  float block_max = run.max;
  for (int64_t i = 0; i < n; ++i) block_max = std::max(block_max, scores[i]);
  const float rescale = std::exp(run.max - block_max);  // 0 on the first block
  for (int64_t i = 0; i < n; ++i) scores[i] -= block_max;
  cpu::ExpArray(scores, n, scores);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += scores[i];
  run.sum = run.sum * rescale + sum;
  run.max = block_max;
  Accumulate(scores, values, n, stride, head_dim, rescale, out);
}

// Rows [begin, end) read straight from the cache (bf16 widened in registers), in blocks of
// kRowChunk; the group's other heads re-read each block from L1.
template <typename T>
void ReadRange(const float* q, int group, const T* keys, const T* values, const float* bias,
               int64_t begin, int64_t end, int64_t stride, int head_dim, SoftmaxPartial* partial,
               float* out) {
  std::fill(out, out + int64_t{group} * head_dim, 0.0f);
  std::fill(partial, partial + group, SoftmaxPartial{});
  for (int64_t first = begin; first < end; first += kRowChunk) {
    const int64_t n = std::min(kRowChunk, end - first);
    const T* k = keys + first * stride;
    const T* v = values + first * stride;
    const float* b = bias != nullptr ? bias + first : nullptr;
    // The first head of the group prefetches (the other heads find the block in L1).
    for (int g = 0; g < group; ++g) {
      const int64_t at = int64_t{g} * head_dim;
      Fold(q + at, k, v, b, n, stride, head_dim, g == 0, end - first, partial[g], out + at);
    }
  }
}

template <typename T>
void ReadGroup(const float* q, int group, const T* keys, const T* values, const float* bias,
               int64_t count, int64_t stride, int head_dim, float* out) {
  if (count == 0) {
    std::fill(out, out + int64_t{group} * head_dim, 0.0f);
    return;
  }
  absl::InlinedVector<SoftmaxPartial, 8> partial(static_cast<size_t>(group));
  ReadRange(q, group, keys, values, bias, 0, count, stride, head_dim, partial.data(), out);
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / partial[static_cast<size_t>(g)].sum;
    float* o = out + int64_t{g} * head_dim;
    for (int c = 0; c < head_dim; ++c) o[c] *= inv;
  }
}

// Copies `count` rows `stride` apart to contiguous fp32 rows of head_dim (bf16 widened).
template <typename T>
ABCD_VECTOR_CLONES void Stage(const T* rows, int64_t count, int64_t stride, int head_dim,
                              float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const T* row = rows + i * stride;
    if (i + kPrefetchRows < count) Prefetch(row + kPrefetchRows * stride, head_dim);
    float* to = out + i * head_dim;
    for (int c = 0; c < head_dim; ++c) to[c] = Load(row, c);
  }
}

template <typename T>
void CausalRun(const float* q, int64_t q_stride, int group, const T* keys, const T* values,
               int64_t first_position, int64_t rows, int64_t stride, int head_dim, float* out,
               int64_t out_stride) {
  const int64_t heads_width = int64_t{group} * head_dim;
  for (int64_t i = 0; i < rows; ++i) std::fill_n(out + i * out_stride, heads_width, 0.0f);
  std::vector<SoftmaxPartial> runs(static_cast<size_t>(rows * group));
  const int64_t block = std::clamp<int64_t>(kStagedFloats / head_dim, 1, kMaxStagedRows);
  std::vector<float> staged(static_cast<size_t>(2 * block * head_dim));
  float* staged_keys = staged.data();
  float* staged_values = staged_keys + block * head_dim;
  const int64_t total = first_position + rows;  // rows the last query reads
  for (int64_t first = 0; first < total; first += block) {
    const int64_t n = std::min(block, total - first);
    Stage(keys + first * stride, n, stride, head_dim, staged_keys);
    Stage(values + first * stride, n, stride, head_dim, staged_values);
    // Queries at positions >= first read this block: rows min(n, position + 1 - first) of it.
    for (int64_t i = std::max<int64_t>(0, first - first_position); i < rows; ++i) {
      const int64_t seen = std::min(n, first_position + i + 1 - first);
      for (int g = 0; g < group; ++g) {
        const int64_t at = int64_t{g} * head_dim;
        Fold(q + i * q_stride + at, staged_keys, staged_values, nullptr, seen, head_dim, head_dim,
             false, seen, runs[static_cast<size_t>(i * group + g)], out + i * out_stride + at);
      }
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int g = 0; g < group; ++g) {
      const float inv = 1.0f / runs[static_cast<size_t>(i * group + g)].sum;
      float* o = out + i * out_stride + int64_t{g} * head_dim;
      for (int c = 0; c < head_dim; ++c) o[c] *= inv;
    }
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

void SoftmaxReadPartial(const float* q, int group, const float* keys, const float* values,
                        int64_t begin, int64_t end, int64_t stride, int head_dim,
                        SoftmaxPartial* partial, float* out) {
  ReadRange(q, group, keys, values, nullptr, begin, end, stride, head_dim, partial, out);
}

void SoftmaxReadPartial(const float* q, int group, const uint16_t* keys, const uint16_t* values,
                        int64_t begin, int64_t end, int64_t stride, int head_dim,
                        SoftmaxPartial* partial, float* out) {
  ReadRange(q, group, keys, values, nullptr, begin, end, stride, head_dim, partial, out);
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

}  // namespace abcd
