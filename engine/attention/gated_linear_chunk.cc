#include "engine/attention/gated_linear_chunk.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {

// y[r, j] += sum_i x[r, i] b[i, j] for r < rows, j < cols (row strides xs, bs, ys): tiles of
// kTileRows rows by kTileCols columns of sums held in registers, each row of b read once per tile.
constexpr int kTileRows = 8, kTileCols = 32;

ABCD_VECTOR_CLONES void ChunkMulAcc(const float* __restrict x, int64_t xs, int rows, int inner,
                                    const float* __restrict b, int64_t bs, int cols,
                                    float* __restrict y, int64_t ys) {
  int j0 = 0;
  for (; j0 + kTileCols <= cols; j0 += kTileCols) {
    int r0 = 0;
    for (; r0 + kTileRows <= rows; r0 += kTileRows) {
      float acc[kTileRows][kTileCols];
#pragma GCC unroll 8
      for (int r = 0; r < kTileRows; ++r) {
        for (int l = 0; l < kTileCols; ++l) acc[r][l] = y[(r0 + r) * ys + j0 + l];
      }
      for (int i = 0; i < inner; ++i) {
        const float* br = b + i * bs + j0;
#pragma GCC unroll 8
        for (int r = 0; r < kTileRows; ++r) {
          const float a = x[(r0 + r) * xs + i];
          for (int l = 0; l < kTileCols; ++l) acc[r][l] += a * br[l];
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < kTileRows; ++r) {
        for (int l = 0; l < kTileCols; ++l) y[(r0 + r) * ys + j0 + l] = acc[r][l];
      }
    }
    for (; r0 < rows; ++r0) {
      float acc[kTileCols];
      for (int l = 0; l < kTileCols; ++l) acc[l] = y[r0 * ys + j0 + l];
      for (int i = 0; i < inner; ++i) {
        const float a = x[r0 * xs + i];
        const float* br = b + i * bs + j0;
        for (int l = 0; l < kTileCols; ++l) acc[l] += a * br[l];
      }
      for (int l = 0; l < kTileCols; ++l) y[r0 * ys + j0 + l] = acc[l];
    }
  }
  if (j0 == cols) return;
  for (int r = 0; r < rows; ++r) {
    float* yr = y + r * ys;
    for (int i = 0; i < inner; ++i) {
      const float a = x[r * xs + i];
      const float* br = b + i * bs;
      for (int j = j0; j < cols; ++j) yr[j] += a * br[j];
    }
  }
}

namespace {

// Per row, per key channel c: S[c] = lambda[c] S[c] + k[c] v, y += q[c] S[c] (one pass over S,
// value columns in register blocks).
constexpr int kValueBlock = 32;

ABCD_VECTOR_CLONES void DecayFoldAndRead(const float* lambda, float fixed_decay, const float* k,
                                         const float* v, const float* q, int key_dim, int value_dim,
                                         float* S, float* y) {
  int j0 = 0;
  for (; j0 + kValueBlock <= value_dim; j0 += kValueBlock) {
    float acc[kValueBlock] = {}, vb[kValueBlock];
    for (int l = 0; l < kValueBlock; ++l) vb[l] = v[j0 + l];
    for (int c = 0; c < key_dim; ++c) {
      const float a = lambda != nullptr ? lambda[c] : fixed_decay, b = k[c], read = q[c];
      float* row = S + int64_t{c} * value_dim + j0;
      for (int l = 0; l < kValueBlock; ++l) {
        row[l] = a * row[l] + b * vb[l];
        acc[l] += read * row[l];
      }
    }
    for (int l = 0; l < kValueBlock; ++l) y[j0 + l] = acc[l];
  }
  for (int j = j0; j < value_dim; ++j) y[j] = 0.0f;
  for (int c = 0; c < key_dim && j0 < value_dim; ++c) {
    const float a = lambda != nullptr ? lambda[c] : fixed_decay, b = k[c], read = q[c];
    float* row = S + int64_t{c} * value_dim;
    for (int j = j0; j < value_dim; ++j) {
      row[j] = a * row[j] + b * v[j];
      y[j] += read * row[j];
    }
  }
}

constexpr int kMaxChunkRows = 64;
constexpr double kMaxSpan = 60.0;  // the largest -b (cumulative log decay) within a chunk

struct ChunkScratch {
  std::vector<double> b;    // [kMaxChunkRows, K] cumulative log decays from the chunk's start
  std::vector<float> qt;    // [kMaxChunkRows, K] q exp(b_t - r)
  std::vector<float> qs;    // [kMaxChunkRows, K] q exp(b_t)
  std::vector<float> kt;    // [K, kMaxChunkRows] k exp(r - b_s), transposed
  std::vector<float> kh;    // [K, kMaxChunkRows] k exp(b_last - b_s), transposed
  std::vector<float> a;     // [kMaxChunkRows, kMaxChunkRows] the decay-masked Q K^T
  std::vector<float> exps;  // [4 K]

  void Reserve(int key_dim) {
    const size_t rows_k = static_cast<size_t>(kMaxChunkRows) * static_cast<size_t>(key_dim);
    if (b.size() >= rows_k) return;
    b.resize(rows_k);
    qt.resize(rows_k);
    qs.resize(rows_k);
    kt.resize(rows_k);
    kh.resize(rows_k);
    a.resize(static_cast<size_t>(kMaxChunkRows) * kMaxChunkRows);
    exps.resize(4 * static_cast<size_t>(key_dim));
  }
};

ChunkScratch& ThreadScratch(int key_dim) {
  thread_local ChunkScratch scratch;
  scratch.Reserve(key_dim);
  return scratch;
}

void RowScanRange(const GatedHeadRows& rows, int64_t first, int64_t count, int key_dim,
                  int value_dim, float* S) {
  for (int64_t t = first; t < first + count; ++t) {
    const int64_t at = t * rows.stride;
    DecayFoldAndRead(rows.lambda != nullptr ? rows.lambda + at : nullptr, rows.fixed_decay,
                     rows.k + at, rows.v + at, rows.q + at, key_dim, value_dim, S,
                     rows.out + t * rows.out_stride);
  }
}

// Rows [t0, t0 + n) as one chunk; s.b holds their cumulative log decays.
void Chunk(const GatedHeadRows& rows, int64_t t0, int n, int K, int V, ChunkScratch& s, float* S) {
  const int mid = (n - 1) / 2;
  const double* ref = s.b.data() + int64_t{mid} * K;
  const double* last = s.b.data() + int64_t{n - 1} * K;
  float* e = s.exps.data();  // [4 K]: the exponents, then their exps (one vectorised pass)
  for (int t = 0; t < n; ++t) {
    const float* q = rows.q + (t0 + t) * rows.stride;
    const float* k = rows.k + (t0 + t) * rows.stride;
    const double* bt = s.b.data() + int64_t{t} * K;
    for (int c = 0; c < K; ++c) {
      e[c] = static_cast<float>(bt[c] - ref[c]);
      e[K + c] = static_cast<float>(bt[c]);
      e[2 * K + c] = static_cast<float>(ref[c] - bt[c]);
      e[3 * K + c] = static_cast<float>(last[c] - bt[c]);
    }
    cpu::ExpArray(e, 4 * int64_t{K}, e);
    float* qt = s.qt.data() + int64_t{t} * K;
    float* qs = s.qs.data() + int64_t{t} * K;
    for (int c = 0; c < K; ++c) {
      qt[c] = q[c] * e[c];
      qs[c] = q[c] * e[K + c];
      s.kt[int64_t{c} * kMaxChunkRows + t] = k[c] * e[2 * K + c];
      s.kh[int64_t{c} * kMaxChunkRows + t] = k[c] * e[3 * K + c];
    }
  }
  // A = Qt Kt^T, kept where s <= t.
  std::fill(s.a.begin(), s.a.end(), 0.0f);
  ChunkMulAcc(s.qt.data(), K, n, K, s.kt.data(), kMaxChunkRows, n, s.a.data(), kMaxChunkRows);
  for (int t = 0; t < n; ++t) {
    std::fill(s.a.data() + int64_t{t} * kMaxChunkRows + t + 1,
              s.a.data() + int64_t{t + 1} * kMaxChunkRows, 0.0f);
  }
  // Y = Qs S0 + A V.
  float* y = rows.out + t0 * rows.out_stride;
  for (int t = 0; t < n; ++t) std::fill(y + t * rows.out_stride, y + t * rows.out_stride + V, 0.0f);
  ChunkMulAcc(s.qs.data(), K, n, K, S, V, V, y, rows.out_stride);
  const float* v = rows.v + t0 * rows.stride;
  ChunkMulAcc(s.a.data(), kMaxChunkRows, n, n, v, rows.stride, V, y, rows.out_stride);
  // S = diag(exp b_last) S0 + Kh^T V.
  for (int c = 0; c < K; ++c) {
    const float d = std::exp(static_cast<float>(last[c]));
    float* row = S + int64_t{c} * V;
    for (int j = 0; j < V; ++j) row[j] *= d;
  }
  ChunkMulAcc(s.kh.data(), kMaxChunkRows, K, n, v, rows.stride, V, S, V);
}

}  // namespace

void GatedRowScan(const GatedHeadRows& rows, int key_dim, int value_dim, float* S) {
  RowScanRange(rows, 0, rows.rows, key_dim, value_dim, S);
}

void GatedChunkScan(const GatedHeadRows& rows, int key_dim, int value_dim, float* S) {
  const int K = key_dim, V = value_dim;
  ChunkScratch& s = ThreadScratch(K);
  const float fixed_log = std::log(rows.fixed_decay);
  int64_t t = 0;
  while (t < rows.rows) {
    // Grow the chunk while every channel's cumulative decay stays within kMaxSpan.
    int n = 0;
    while (n < kMaxChunkRows && t + n < rows.rows) {
      const float* lambda = rows.lambda != nullptr ? rows.lambda + (t + n) * rows.stride : nullptr;
      double* bn = s.b.data() + int64_t{n} * K;
      const double* prev = n > 0 ? s.b.data() + int64_t{n - 1} * K : nullptr;
      double span = 0;
      for (int c = 0; c < K; ++c) {
        const double step = lambda != nullptr ? std::log(lambda[c]) : double{fixed_log};
        bn[c] = (prev != nullptr ? prev[c] : 0.0) + step;
        span = std::max(span, -bn[c]);
      }
      if (!(span <= kMaxSpan)) break;  // NaN too
      ++n;
    }
    if (n < 4) {  // a reset, or too few rows for the products: row by row
      const int64_t count = std::max<int64_t>(n, 1);
      RowScanRange(rows, t, count, K, V, S);
      t += count;
      continue;
    }
    Chunk(rows, t, n, K, V, s, S);
    t += n;
  }
}

}  // namespace abcd
