// SoftmaxReadCausalRun (softmax_read.h): a prompt chunk's causal read of the cache. A chunk deep
// in a long prompt reads every cached row before it. The kernels here read each block of cached
// rows where it is (fp32 rows) or widened once into a contiguous fp32 block (bf16, f16: a
// vector copy, nothing transposed or packed), and multiply it by the chunk's queries in register
// tiles, so the chunk costs its queries' products with the cached rows plus one widening pass
// over them. (The kernels before these widened, transposed and packed every cached row once per
// chunk for cpu::Linear, an O(P) copy per chunk at position P that small chunks could not
// amortise: loadtest/results/README.md, "Long contexts through the server".)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/attention/softmax_bf16_kernels.h"
#include "engine/attention/softmax_kernels.h"
#include "engine/attention/softmax_read.h"
#include "engine/ops/vector_clones.h"

namespace abcd {
namespace {

using namespace softmax_internal;  // NOLINT(build/namespaces): the kernels' own helpers

// Cached rows per block: a block's keys and values (fp32, head_dim 64: 32 KiB each) stay in
// L1/L2 while every query of the run reads them.
constexpr int64_t kKeyBlock = 128;
// Queries per pass over a block: their scores (kQueryTile x kKeyBlock floats, 24 KiB) are written
// by the keys' pass and read by the values' pass. A multiple of kDotQueries and kPvQueries.
constexpr int64_t kQueryTile = 48;
// Register tiles: kDotQueries x kDotKeys dot products (12 vector accumulators, each query's
// four summed across lanes together at the end); kPvQueries queries x kPvVectors vectors of
// output columns (12 accumulators).
constexpr int kDotQueries = 3;
constexpr int kDotKeys = 4;
constexpr int kPvQueries = 3;
constexpr int kPvVectors = 4;

template <typename T>
ABCD_INLINE void PrefetchL2(const T* row, int head_dim) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int c = 0; c < head_dim; c += kPerLine) __builtin_prefetch(row + c, 0, 2);
}

// s[i * ld + j] = q_i . k_j for QN queries (q, head_dim apart) and KN keys (`stride` apart).
template <int QN, int KN>
ABCD_INLINE void DotTile(const float* q, const float* k, int64_t stride, int head_dim, float* s,
                         int64_t ld) {
  Float8 acc[QN][KN] = {};
  int c = 0;
  for (; c + 8 <= head_dim; c += 8) {
    Float8 x[KN];
#pragma GCC unroll 4
    for (int j = 0; j < KN; ++j) Load8(k + j * stride + c, x[j]);
#pragma GCC unroll 4
    for (int i = 0; i < QN; ++i) {
      Float8 qv;
      Load8(q + i * head_dim + c, qv);
#pragma GCC unroll 4
      for (int j = 0; j < KN; ++j) acc[i][j] += qv * x[j];
    }
  }
  // Horizontal sums, each query's four keys at a time (one 16-byte store).
  for (int i = 0; i < QN; ++i) {
    float* row = s + i * ld;
    int j = 0;
    for (; j + 4 <= KN; j += 4) {
      Sum4x8(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3], row + j);
    }
    for (; j < KN; ++j) row[j] = Sum8(acc[i][j]);
  }
  for (; c < head_dim; ++c) {
    for (int i = 0; i < QN; ++i) {
      for (int j = 0; j < KN; ++j) {
        s[i * ld + j] = std::fma(q[i * head_dim + c], k[j * stride + c], s[i * ld + j]);
      }
    }
  }
}

// Keys [0, limit) of QN queries: DotTile over kDotKeys keys at a time, then the rest.
template <int QN>
ABCD_INLINE void DotRows(const float* q, const float* k, int64_t stride, int head_dim,
                         int64_t limit, float* s, int64_t ld) {
  int64_t j = 0;
  for (; j + kDotKeys <= limit; j += kDotKeys) {
    DotTile<QN, kDotKeys>(q, k + j * stride, stride, head_dim, s + j, ld);
  }
  for (; j < limit; ++j) DotTile<QN, 1>(q, k + j * stride, stride, head_dim, s + j, ld);
}

// scores[t * ld + j] = q_t . k_j for the `count` queries of a tile (q, head_dim apart) and the
// block's keys j < limit[t] (rows `stride` apart; limit non-decreasing in t); entries past a
// query's limit but within its register tile's are computed too, the rest left as they were.
ABCD_VECTOR_CLONES void ScoreTile(const float* q, int64_t count, const float* keys, int64_t stride,
                                  int head_dim, const int64_t* limit, float* scores, int64_t ld) {
  int64_t t = 0;
  for (; t + kDotQueries <= count; t += kDotQueries) {
    DotRows<kDotQueries>(q + t * head_dim, keys, stride, head_dim, limit[t + kDotQueries - 1],
                         scores + t * ld, ld);
  }
  for (; t < count; ++t) {
    DotRows<1>(q + t * head_dim, keys, stride, head_dim, limit[t], scores + t * ld, ld);
  }
}

// out_i[c0 .. c0 + 8V) = out_i * rescale_i + sum_{j < limit} p_i[j] values[j][c0 ..] for QN
// queries (p_i = p + i * ld, out_i = out + i * head_dim), the QN x V output vectors held in
// registers over all rows.
template <int QN, int V>
ABCD_INLINE void PvTile(const float* p, int64_t ld, const float* values, int64_t stride,
                        int64_t limit, int c0, int head_dim, const float* rescale, float* out) {
  Float8 acc[QN][V];
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      Load8(out + i * head_dim + c0 + 8 * v, acc[i][v]);
      acc[i][v] *= rescale[i];
    }
  }
  for (int64_t j = 0; j < limit; ++j) {
    const float* row = values + j * stride + c0;
    Float8 x[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Load8(row + 8 * v, x[v]);
#pragma GCC unroll 4
    for (int i = 0; i < QN; ++i) {
      const float w = p[i * ld + j];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[i][v] += w * x[v];
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < QN; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) Store8(acc[i][v], out + i * head_dim + c0 + 8 * v);
  }
}

// PvTile over every column of QN queries: kPvVectors vectors at a time, then one, then the
// columns past the last multiple of 8.
template <int QN>
ABCD_INLINE void PvRows(const float* p, int64_t ld, const float* values, int64_t stride,
                        int64_t limit, int head_dim, const float* rescale, float* out) {
  int c = 0;
  for (; c + 8 * kPvVectors <= head_dim; c += 8 * kPvVectors) {
    PvTile<QN, kPvVectors>(p, ld, values, stride, limit, c, head_dim, rescale, out);
  }
  for (; c + 8 <= head_dim; c += 8) {
    PvTile<QN, 1>(p, ld, values, stride, limit, c, head_dim, rescale, out);
  }
  for (; c < head_dim; ++c) {
    for (int i = 0; i < QN; ++i) {
      float sum = out[i * head_dim + c] * rescale[i];
      for (int64_t j = 0; j < limit; ++j)
        sum = std::fma(p[i * ld + j], values[j * stride + c], sum);
      out[i * head_dim + c] = sum;
    }
  }
}

// out_t = out_t * rescale[t] + sum_{j < limit[t]} p_t[j] values[j] for the `count` queries of
// a tile (p_t = p + t * ld; out_t = out + t * head_dim); p_t[j] must be 0 from the query's own
// limit up to its register tile's.
ABCD_VECTOR_CLONES void AccumulateTile(const float* p, int64_t ld, int64_t count,
                                       const float* values, int64_t stride, int head_dim,
                                       const int64_t* limit, const float* rescale, float* out) {
  int64_t t = 0;
  for (; t + kPvQueries <= count; t += kPvQueries) {
    PvRows<kPvQueries>(p + t * ld, ld, values, stride, limit[t + kPvQueries - 1], head_dim,
                       rescale + t, out + t * head_dim);
  }
  for (; t < count; ++t) {
    PvRows<1>(p + t * ld, ld, values, stride, limit[t], head_dim, rescale + t, out + t * head_dim);
  }
}

// Copies `count` rows `stride` apart to contiguous fp32 rows of head_dim (bf16, f16 widened).
template <typename T>
ABCD_INLINE void StageIn(const T* rows, int64_t count, int64_t stride, int head_dim, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    const T* row = rows + i * stride;
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

// A thread's buffers for CausalRun, kept from call to call (grown to the largest run, never
// shrunk): a prompt chunk's read allocates, zeroes and faults in nothing but its outputs.
struct CausalRunScratch {
  std::vector<float> floats;
  std::vector<uint16_t> queries_bf16;
  std::vector<uint32_t> packed;
  std::vector<SoftmaxPartial> runs;
};

CausalRunScratch& ThreadCausalRunScratch() {
  thread_local CausalRunScratch scratch;
  return scratch;
}

template <typename T>
T* CausalRunGrow(std::vector<T>& buffer, int64_t count) {
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// The causal run, blocked both ways: for each block of kKeyBlock cached rows, and each tile of
// kQueryTile queries that reach it, the tile's scores against the block's keys (ScoreTile), the
// rows past each query's position masked, each query's running softmax advanced, and the
// block's values added to its output (AccumulateTile). The group's query heads are rows of the
// same tiles: query t = i * group + g is head g of run row i, so the queries that reach a block
// are one contiguous range and each block is read once from memory for all of them. fp32 rows
// are read in place; bf16 and f16 blocks are widened once into fp32 first (Stage). Widening in
// the tiles instead, once per tile of queries, measured 1.0-1.5x slower (f16 worst), and the
// cache rows' stride (every head of a row) maps a block's rows onto few L1 sets.
//
// kBf16Products (bf16 rows only): the queries are rounded to bf16 once, each block is packed
// for vdpbf16ps instead of widened (softmax_bf16_kernels.h), and each tile's softmax weights are
// rounded to bf16 before they multiply the values; the running softmax stays fp32.
//
// window > 0 (sliding windows): query row i reads only rows [first_position + i + 1 - window,
// first_position + i]; the rows before its window are masked like those past its position, and
// the queries whose window ends before a block skip it. window 0: every earlier row.
template <typename T, bool kBf16Products = false>
void CausalRun(const float* q, int64_t q_stride, int group, const T* keys, const T* values,
               int64_t first_position, int64_t rows, int64_t stride, int head_dim, float* out,
               int64_t out_stride, int64_t window = 0) {
  static_assert(!kBf16Products || std::is_same_v<T, uint16_t>);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  constexpr bool kStaged = !std::is_same_v<T, float> && !kBf16Products;
  const int64_t total = first_position + rows;  // rows the last query reads
  const int64_t d = head_dim;
  const int64_t queries_count = rows * group;
  // One buffer: the queries (copied), their outputs, a tile's scores, the widened block. Only
  // the outputs and the running softmaxes need initial values; the rest is written before read.
  const int64_t staged = kStaged ? 2 * kKeyBlock * d : 0;
  CausalRunScratch& scratch = ThreadCausalRunScratch();
  float* queries =
      CausalRunGrow(scratch.floats, 2 * queries_count * d + kQueryTile * kKeyBlock + staged);
  float* acc = queries + queries_count * d;
  std::fill_n(acc, queries_count * d, 0.0f);
  float* scores = acc + queries_count * d;
  float* staged_keys = scores + kQueryTile * kKeyBlock;
  float* staged_values = staged_keys + staged / 2;
  // bf16 products: the rounded queries, the packed block and a tile's rounded weights.
  uint16_t* queries_bf16 = nullptr;
  uint32_t* packed_keys = nullptr;
  uint32_t* packed_values = nullptr;
  uint32_t* weights = nullptr;
  if constexpr (kBf16Products) {
    queries_bf16 = CausalRunGrow(scratch.queries_bf16, queries_count * d);
    const int64_t key_dwords = softmax_bf16::PackedKeyDwords(kKeyBlock, head_dim);
    const int64_t value_dwords = softmax_bf16::PackedValueDwords(kKeyBlock, head_dim);
    packed_keys =
        CausalRunGrow(scratch.packed, key_dwords + value_dwords + kQueryTile * kKeyBlock / 2);
    packed_values = packed_keys + key_dwords;
    weights = packed_values + value_dwords;
  }
  SoftmaxPartial* runs = CausalRunGrow(scratch.runs, queries_count);
  std::fill_n(runs, queries_count, SoftmaxPartial{});
  float rescale[kQueryTile];
  int64_t limit[kQueryTile];
  int64_t lower[kQueryTile] = {};  // window > 0: the rows before each query's window in this block
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(q + i * q_stride, group * d, queries + i * group * d);
  }
  if constexpr (kBf16Products) {
    cpu::kernels::RoundRowsToBf16(queries, queries_count, d, queries_bf16);
  }
  for (int64_t first = 0; first < total; first += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, total - first);
    const int64_t active = std::max<int64_t>(0, first - first_position);  // first row here
    const T* k = keys + first * stride;
    const T* v = values + first * stride;
    // The next block's keys and values, asked of the memory system (into L2) while this one is
    // read.
    const int64_t next = std::min(kKeyBlock, total - first - n);
    for (int64_t j = 0; j < next; ++j) {
      PrefetchL2(k + (n + j) * stride, head_dim);
      PrefetchL2(v + (n + j) * stride, head_dim);
    }
    const float* block_keys = nullptr;
    const float* block_values = nullptr;
    int64_t block_stride = 0;
    if constexpr (kBf16Products) {
      softmax_bf16::PackKeys(k, n, stride, head_dim, packed_keys);
      softmax_bf16::PackValues(v, n, stride, head_dim, packed_values);
    } else if constexpr (kStaged) {
      Stage(k, n, stride, head_dim, staged_keys);
      Stage(v, n, stride, head_dim, staged_values);
      block_keys = staged_keys;
      block_values = staged_values;
      block_stride = d;
    } else {
      block_keys = k;
      block_values = v;
      block_stride = stride;
    }
    // The queries that reach this block: from the first row at or past it to the last whose
    // window starts before its end.
    const int64_t reach =
        window > 0 ? std::min(queries_count,
                              std::max<int64_t>(0, first + n + window - 1 - first_position) * group)
                   : queries_count;
    for (int64_t t0 = active * group; t0 < reach; t0 += kQueryTile) {
      const int64_t count = std::min(kQueryTile, reach - t0);
      for (int64_t t = 0; t < count; ++t) {
        const int64_t i = (t0 + t) / group;  // the run row of this query
        limit[t] = std::min(n, first_position + i + 1 - first);
        if (window > 0) lower[t] = std::max<int64_t>(0, first_position + i + 1 - window - first);
      }
      if constexpr (kBf16Products) {
        softmax_bf16::ScoreTile(queries_bf16 + t0 * d, count, packed_keys, head_dim, limit, scores,
                                kKeyBlock);
      } else {
        ScoreTile(queries + t0 * d, count, block_keys, block_stride, head_dim, limit, scores,
                  kKeyBlock);
      }
      for (int64_t t = 0; t < count; ++t) {
        float* row = scores + t * kKeyBlock;
        std::fill(row + limit[t], row + n, kMasked);
        if (window > 0) std::fill(row, row + lower[t], kMasked);
        rescale[t] = AdvanceRun(row, n, limit[t], runs[t0 + t]);
      }
      if constexpr (kBf16Products) {
        softmax_bf16::RoundWeights(scores, kKeyBlock, count, n, weights, kKeyBlock / 2);
        softmax_bf16::AccumulateTile(weights, kKeyBlock / 2, count, packed_values, head_dim, limit,
                                     rescale, acc + t0 * d);
      } else {
        AccumulateTile(scores, kKeyBlock, count, block_values, block_stride, head_dim, limit,
                       rescale, acc + t0 * d);
      }
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int g = 0; g < group; ++g) {
      const int64_t query = i * group + g;
      const float inv = 1.0f / runs[query].sum;
      const float* a = acc + query * d;
      float* o = out + i * out_stride + g * d;
      for (int64_t c = 0; c < d; ++c) o[c] = a[c] * inv;
    }
  }
}

}  // namespace

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const float* keys,
                          const float* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride) {
  CausalRun(q, q_stride, group, keys, values, first_position, rows, stride, head_dim, out,
            out_stride);
}

void SoftmaxReadWindowRun(const float* q, int64_t q_stride, int group, const float* keys,
                          const float* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, int64_t window, float* out, int64_t out_stride) {
  CausalRun(q, q_stride, group, keys, values, first_position, rows, stride, head_dim, out,
            out_stride, window);
}

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const uint16_t* keys,
                          const uint16_t* values, int64_t first_position, int64_t rows,
                          int64_t stride, int head_dim, float* out, int64_t out_stride) {
  CausalRun(q, q_stride, group, keys, values, first_position, rows, stride, head_dim, out,
            out_stride);
}

void SoftmaxReadCausalRunBf16Products(const float* q, int64_t q_stride, int group,
                                      const uint16_t* keys, const uint16_t* values,
                                      int64_t first_position, int64_t rows, int64_t stride,
                                      int head_dim, float* out, int64_t out_stride) {
  CausalRun<uint16_t, true>(q, q_stride, group, keys, values, first_position, rows, stride,
                            head_dim, out, out_stride);
}

void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const F16* keys,
                          const F16* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride) {
  ReadF16(keys, values, false, [&](const auto* k, const auto* v) {
    CausalRun(q, q_stride, group, k, v, first_position, rows, stride, head_dim, out, out_stride);
  });
}

}  // namespace abcd
