#include "engine/attention/gated_delta_chunk.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/attention/gated_linear_chunk.h"
#include "engine/ops/vector_math.h"

namespace abcd {

void GatedDeltaFoldRow(const float* k, const float* v, float decay, float beta, const float* read,
                       int key_dim, int value_dim, float* S, float* out) {
  const int K = key_dim, V = value_dim;
  // v' = beta (v - (decay S)^T k), from the undecayed S: one pass for the read-out ...
  absl::InlinedVector<float, 512> delta(static_cast<size_t>(V), 0.0f);
  for (int c = 0; c < K; ++c) cpu::Axpy(delta.data(), k[c], S + int64_t{c} * V, V);
  for (int j = 0; j < V; ++j) {
    delta[static_cast<size_t>(j)] = beta * (v[j] - decay * delta[static_cast<size_t>(j)]);
  }
  // ... and one for S = decay S + k v'^T (and the read of the new S).
  if (read != nullptr) std::fill(out, out + V, 0.0f);
  for (int c = 0; c < K; ++c) {
    float* s = S + int64_t{c} * V;
    cpu::DecayAdd(s, decay, k[c], delta.data(), V);
    if (read != nullptr) cpu::Axpy(out, read[c], s, V);
  }
}

void GatedDeltaRowScan(const GatedDeltaHeadRows& rows, int key_dim, int value_dim, float* S) {
  for (int64_t t = 0; t < rows.rows; ++t) {
    const int64_t at = t * rows.stride;
    GatedDeltaFoldRow(rows.k + at, rows.v + at, rows.decay[at], rows.beta[at], rows.q + at, key_dim,
                      value_dim, S, rows.out + t * rows.out_stride);
  }
}

namespace {

constexpr int kGdnChunkRows = 64;
// The most negative cumulative log decay within a chunk (e^-60, ~1e-26, far above float's
// smallest normal 1.2e-38: every decay factor of a chunk's products is then a normal float).
constexpr double kGdnMaxSpan = 60.0;

struct GdnChunkScratch {
  std::vector<float> kt;         // [K, 64]: k_s transposed
  std::vector<float> kh;         // [K, 64]: k_s e^(b_last - b_s), transposed
  std::vector<float> decays;     // [64, 64]: e^(b_t - b_s) for s <= t, else 0
  std::vector<float> a;          // [64, 64]: K K^T, then the decay-masked Q K^T
  std::vector<float> t;          // [64, 64]: T = (I + A)^-1, then T diag(beta)
  std::vector<float> tw;         // [64, 64]: -T diag(beta e^b)
  std::vector<float> w;          // [64, K]: -T diag(beta e^b) K
  std::vector<float> vnew;       // [64, V]: the new values V'
  double b[kGdnChunkRows] = {};  // cumulative log decays from the chunk's start

  void Reserve(int key_dim, int value_dim) {
    const size_t rows_k = static_cast<size_t>(kGdnChunkRows) * static_cast<size_t>(key_dim);
    const size_t rows_v = static_cast<size_t>(kGdnChunkRows) * static_cast<size_t>(value_dim);
    const size_t square = static_cast<size_t>(kGdnChunkRows) * kGdnChunkRows;
    if (kt.size() < rows_k) {
      kt.resize(rows_k);
      kh.resize(rows_k);
      w.resize(rows_k);
    }
    if (vnew.size() < rows_v) vnew.resize(rows_v);
    if (a.size() < square) {
      decays.resize(square);
      a.resize(square);
      t.resize(square);
      tw.resize(square);
    }
  }
};

GdnChunkScratch& GdnThreadScratch(int key_dim, int value_dim) {
  thread_local GdnChunkScratch scratch;
  scratch.Reserve(key_dim, value_dim);
  return scratch;
}

// Rows [t0, t0 + n) as one chunk from the state S (S0), s.b holding their cumulative log decays.
void GdnChunk(const GatedDeltaHeadRows& rows, int64_t t0, int n, int K, int V, GdnChunkScratch& s,
              float* S) {
  constexpr int64_t kLd = kGdnChunkRows;  // row stride of the [64, *] and [K, 64] buffers
  const int64_t st = rows.stride;
  const float* q = rows.q + t0 * st;
  const float* k = rows.k + t0 * st;
  const float* v = rows.v + t0 * st;
  const float* beta = rows.beta + t0 * st;
  const double last = s.b[n - 1];
  for (int r = 0; r < n; ++r) {
    const float* kr = k + r * st;
    const float tail = static_cast<float>(std::exp(last - s.b[r]));
    for (int c = 0; c < K; ++c) {
      s.kt[static_cast<size_t>(c * kLd + r)] = kr[c];
      s.kh[static_cast<size_t>(c * kLd + r)] = kr[c] * tail;
    }
  }
  float* decays = s.decays.data();
  std::fill(decays, decays + n * kLd, 0.0f);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c <= r; ++c) {
      decays[r * kLd + c] = static_cast<float>(std::exp(s.b[r] - s.b[c]));
    }
  }
  // T = (I + A)^-1, A[r, c] = beta_r e^(b_r - b_c) k_r . k_c for c < r: row r of T is
  // e_r - sum_{m < r} A[r, m] T[m, :] (forward substitution; T is unit lower triangular).
  float* a = s.a.data();
  float* T = s.t.data();
  std::fill(a, a + n * kLd, 0.0f);
  ChunkMulAcc(k, st, n, K, s.kt.data(), kLd, n, a, kLd);
  for (int r = 0; r < n; ++r) {
    float* tr = T + r * kLd;
    std::fill(tr, tr + kLd, 0.0f);
    tr[r] = 1.0f;
    const float br = beta[r * st];
    for (int m = 0; m < r; ++m) {
      const float arm = br * decays[r * kLd + m] * a[r * kLd + m];
      const float* tm = T + m * kLd;
      for (int c = 0; c <= m; ++c) tr[c] -= arm * tm[c];
    }
  }
  // T diag(beta) and -T diag(beta e^b).
  float from_start[kGdnChunkRows];  // e^(b_r)
  for (int r = 0; r < n; ++r) from_start[r] = static_cast<float>(std::exp(s.b[r]));
  float* tw = s.tw.data();
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < kLd; ++c) {
      const float scaled = c <= r ? T[r * kLd + c] * beta[c * st] : 0.0f;
      T[r * kLd + c] = scaled;
      tw[r * kLd + c] = -scaled * (c <= r ? from_start[c] : 0.0f);
    }
  }
  // V' = T diag(beta) V - (T diag(beta e^b) K) S0.
  float* vnew = s.vnew.data();
  float* w = s.w.data();
  std::fill(vnew, vnew + int64_t{n} * V, 0.0f);
  std::fill(w, w + int64_t{n} * K, 0.0f);
  ChunkMulAcc(T, kLd, n, n, v, st, V, vnew, V);
  ChunkMulAcc(tw, kLd, n, n, k, st, K, w, K);
  ChunkMulAcc(w, K, n, K, S, V, V, vnew, V);
  // Y = diag(e^b) Q S0 + ((Q K^T) . decays) V'.
  float* y = rows.out + t0 * rows.out_stride;
  for (int r = 0; r < n; ++r) std::fill(y + r * rows.out_stride, y + r * rows.out_stride + V, 0.0f);
  ChunkMulAcc(q, st, n, K, S, V, V, y, rows.out_stride);
  for (int r = 0; r < n; ++r) {
    float* yr = y + r * rows.out_stride;
    for (int j = 0; j < V; ++j) yr[j] *= from_start[r];
  }
  std::fill(a, a + n * kLd, 0.0f);
  ChunkMulAcc(q, st, n, K, s.kt.data(), kLd, n, a, kLd);
  for (int i = 0; i < n * kLd; ++i) a[i] *= decays[i];
  ChunkMulAcc(a, kLd, n, n, vnew, V, V, y, rows.out_stride);
  // S = e^(b_last) S0 + (K e^(b_last - b))^T V'.
  const float carry = static_cast<float>(std::exp(last));
  for (int64_t i = 0; i < int64_t{K} * V; ++i) S[i] *= carry;
  ChunkMulAcc(s.kh.data(), kLd, K, n, vnew, V, V, S, V);
}

}  // namespace

void GatedDeltaChunkScan(const GatedDeltaHeadRows& rows, int key_dim, int value_dim, float* S) {
  const int K = key_dim, V = value_dim;
  GdnChunkScratch& s = GdnThreadScratch(K, V);
  int64_t t = 0;
  while (t < rows.rows) {
    // Grow the chunk while its cumulative log decay stays within kGdnMaxSpan.
    int n = 0;
    double b = 0.0;
    while (n < kGdnChunkRows && t + n < rows.rows) {
      const double next = b + std::log(static_cast<double>(rows.decay[(t + n) * rows.stride]));
      if (!(-next <= kGdnMaxSpan)) break;  // NaN too
      s.b[n++] = b = next;
    }
    if (n == 0) {  // a row that alone decays past kGdnMaxSpan (a reset): by the row scan
      const int64_t at = t * rows.stride;
      GatedDeltaFoldRow(rows.k + at, rows.v + at, rows.decay[at], rows.beta[at], rows.q + at, K, V,
                        S, rows.out + t * rows.out_stride);
      ++t;
      continue;
    }
    GdnChunk(rows, t, n, K, V, s, S);
    t += n;
  }
}

}  // namespace abcd
