#include "engine/attention/gsa_chunk.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/attention/gated_linear_chunk.h"
#include "engine/attention/slot_scan.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

constexpr int kGsaChunk = 64;
constexpr double kGsaMaxSpan = 60.0;  // the largest -b (cumulative log gate) within a chunk

struct GsaScratch {
  std::vector<double> b;     // [C, M] cumulative log gates from the chunk's start
  std::vector<float> eb;     // [C, M] exp(b_t)
  std::vector<float> ebr;    // [C, M] exp(b_t - r), r the middle row's b
  std::vector<float> wt;     // [C, M] w_s exp(r - b_s)
  std::vector<float> wtt;    // [M, C] the same, transposed
  std::vector<float> wht;    // [M, C] w_s exp(b_last - b_s), transposed
  std::vector<float> kt;     // [K, C] the chunk's keys, transposed
  std::vector<float> k0t;    // [K, M] the key memories at the chunk's start, transposed
  std::vector<float> a;      // [C, C] Q K^T, then (P exp(b - r)) (W exp(r - b))^T; causal
  std::vector<float> sc;     // [C, M] scores
  std::vector<float> tmp;    // [C, M]
  std::vector<float> p;      // [C, M] the slots' softmax weights
  std::vector<float> exps;   // [4 M]
  std::vector<float> decay;  // [M] exp(b_last)

  void Reserve(int K, int M) {
    const size_t cm = static_cast<size_t>(kGsaChunk) * static_cast<size_t>(M);
    const size_t km = static_cast<size_t>(K) * static_cast<size_t>(M);
    const size_t kc = static_cast<size_t>(K) * kGsaChunk;
    if (b.size() >= cm && kt.size() >= kc && k0t.size() >= km) return;
    for (auto* v : {&eb, &ebr, &wt, &wtt, &wht, &sc, &tmp, &p}) v->resize(std::max(v->size(), cm));
    b.resize(std::max(b.size(), cm));
    kt.resize(std::max(kt.size(), kc));
    k0t.resize(std::max(k0t.size(), km));
    a.resize(static_cast<size_t>(kGsaChunk) * kGsaChunk);
    exps.resize(std::max(exps.size(), 4 * static_cast<size_t>(M)));
    decay.resize(std::max(decay.size(), static_cast<size_t>(M)));
  }
};

GsaScratch& ThreadGsaScratch(int K, int M) {
  thread_local GsaScratch scratch;
  scratch.Reserve(K, M);
  return scratch;
}

void GsaRowRange(const GsaHeadRows& rows, int64_t first, int64_t count, int K, int V, int M,
                 float* keys, float* values, float* scores, float* p) {
  for (int64_t t = first; t < first + count; ++t) {
    const int64_t at = t * rows.stride;
    FoldSlotsAndScore(SlotFold::kDecay, rows.k + at, rows.alpha + at, rows.q + at, M, K, keys,
                      scores);
    SlotSoftmax(scores, nullptr, M, p);
    FoldSlotsAndMix(SlotFold::kDecay, rows.v + at, rows.alpha + at, p, M, V, values,
                    rows.out + t * rows.out_stride);
  }
}

// Zeroes a [n, n] (row stride C) above the diagonal: s > t.
void CausalMask(float* a, int n) {
  for (int t = 0; t < n; ++t) {
    std::fill(a + int64_t{t} * kGsaChunk + t + 1, a + int64_t{t + 1} * kGsaChunk, 0.0f);
  }
}

// Rows [t0, t0 + n) as one chunk; s.b holds their cumulative log gates.
void GsaChunk(const GsaHeadRows& rows, int64_t t0, int n, int K, int V, int M, GsaScratch& s,
              float* keys, float* values) {
  constexpr int C = kGsaChunk;
  const double* ref = s.b.data() + int64_t{(n - 1) / 2} * M;
  const double* last = s.b.data() + int64_t{n - 1} * M;
  const float* q = rows.q + t0 * rows.stride;
  const float* k = rows.k + t0 * rows.stride;
  const float* v = rows.v + t0 * rows.stride;
  float* e = s.exps.data();  // [4 M]: the exponents, then their exps (one vectorised pass)
  for (int t = 0; t < n; ++t) {
    const double* bt = s.b.data() + int64_t{t} * M;
    for (int m = 0; m < M; ++m) {
      e[m] = static_cast<float>(bt[m] - ref[m]);
      e[M + m] = static_cast<float>(ref[m] - bt[m]);
      e[2 * M + m] = static_cast<float>(last[m] - bt[m]);
      e[3 * M + m] = static_cast<float>(bt[m]);
    }
    cpu::ExpArray(e, 4 * int64_t{M}, e);
    const float* alpha = rows.alpha + (t0 + t) * rows.stride;
    const int64_t tm = int64_t{t} * M;
    for (int m = 0; m < M; ++m) {
      const float w = 1.0f - alpha[m];
      s.ebr[tm + m] = e[m];
      s.wt[tm + m] = w * e[M + m];
      s.wtt[int64_t{m} * C + t] = w * e[M + m];
      s.wht[int64_t{m} * C + t] = w * e[2 * M + m];
      s.eb[tm + m] = e[3 * M + m];
    }
    const float* kr = k + t * rows.stride;
    for (int c = 0; c < K; ++c) s.kt[int64_t{c} * C + t] = kr[c];
  }
  for (int m = 0; m < M; ++m) {
    const float* row = keys + int64_t{m} * K;
    for (int c = 0; c < K; ++c) s.k0t[int64_t{c} * M + m] = row[c];
  }
  // Scores: exp(b_t) (K~0 q_t) + exp(b_t - r) sum_{s <= t} (q_t . k_s) w_s exp(r - b_s).
  const size_t nm = static_cast<size_t>(n) * M;
  std::fill(s.sc.begin(), s.sc.begin() + static_cast<std::ptrdiff_t>(nm), 0.0f);
  std::fill(s.tmp.begin(), s.tmp.begin() + static_cast<std::ptrdiff_t>(nm), 0.0f);
  std::fill(s.a.begin(), s.a.end(), 0.0f);
  ChunkMulAcc(q, rows.stride, n, K, s.k0t.data(), M, M, s.sc.data(), M);
  ChunkMulAcc(q, rows.stride, n, K, s.kt.data(), C, n, s.a.data(), C);
  CausalMask(s.a.data(), n);
  ChunkMulAcc(s.a.data(), C, n, n, s.wt.data(), M, M, s.tmp.data(), M);
  for (size_t i = 0; i < nm; ++i) s.sc[i] = s.eb[i] * s.sc[i] + s.ebr[i] * s.tmp[i];
  // Softmax per row; then P exp(b_t) (tmp) for the memories' read and P exp(b_t - r) (sc).
  for (int t = 0; t < n; ++t) {
    SlotSoftmax(s.sc.data() + int64_t{t} * M, nullptr, M, s.p.data() + int64_t{t} * M);
  }
  for (size_t i = 0; i < nm; ++i) {
    s.tmp[i] = s.p[i] * s.eb[i];
    s.sc[i] = s.p[i] * s.ebr[i];
  }
  // Reads: (P exp(b)) V~0 + ((P exp(b - r)) (W exp(r - b))^T, causal) V.
  float* y = rows.out + t0 * rows.out_stride;
  for (int t = 0; t < n; ++t) std::fill(y + t * rows.out_stride, y + t * rows.out_stride + V, 0.0f);
  ChunkMulAcc(s.tmp.data(), M, n, M, values, V, V, y, rows.out_stride);
  std::fill(s.a.begin(), s.a.end(), 0.0f);
  ChunkMulAcc(s.sc.data(), M, n, M, s.wtt.data(), C, n, s.a.data(), C);
  CausalMask(s.a.data(), n);
  ChunkMulAcc(s.a.data(), C, n, n, v, rows.stride, V, y, rows.out_stride);
  // Memories: diag(exp b_last) M0 + (W exp(b_last - b))^T [K | V].
  float* d = s.decay.data();
  for (int m = 0; m < M; ++m) d[m] = static_cast<float>(last[m]);
  cpu::ExpArray(d, M, d);
  for (int m = 0; m < M; ++m) {
    float* kr = keys + int64_t{m} * K;
    for (int c = 0; c < K; ++c) kr[c] *= d[m];
    float* vr = values + int64_t{m} * V;
    for (int j = 0; j < V; ++j) vr[j] *= d[m];
  }
  ChunkMulAcc(s.wht.data(), C, M, n, k, rows.stride, K, keys, K);
  ChunkMulAcc(s.wht.data(), C, M, n, v, rows.stride, V, values, V);
}

}  // namespace

void GsaRowScan(const GsaHeadRows& rows, int key_dim, int value_dim, int slots, float* keys,
                float* values) {
  std::vector<float>& buffer = ThreadGsaScratch(key_dim, slots).exps;  // [4 M]
  GsaRowRange(rows, 0, rows.rows, key_dim, value_dim, slots, keys, values, buffer.data(),
              buffer.data() + slots);
}

void GsaChunkScan(const GsaHeadRows& rows, int key_dim, int value_dim, int slots, float* keys,
                  float* values) {
  const int K = key_dim, V = value_dim, M = slots;
  GsaScratch& s = ThreadGsaScratch(K, M);
  int64_t t = 0;
  while (t < rows.rows) {
    // Grow the chunk while every slot's cumulative log gate stays within kGsaMaxSpan.
    int n = 0;
    while (n < kGsaChunk && t + n < rows.rows) {
      const float* alpha = rows.alpha + (t + n) * rows.stride;
      double* bn = s.b.data() + int64_t{n} * M;
      const double* prev = n > 0 ? s.b.data() + int64_t{n - 1} * M : nullptr;
      double span = 0;
      for (int m = 0; m < M; ++m) {
        bn[m] = (prev != nullptr ? prev[m] : 0.0) + std::log(static_cast<double>(alpha[m]));
        span = std::max(span, -bn[m]);
      }
      if (!(span <= kGsaMaxSpan)) break;  // NaN too
      ++n;
    }
    if (n < 4) {  // a reset, or too few rows for the products: row by row
      const int64_t count = std::max<int64_t>(n, 1);
      GsaRowRange(rows, t, count, K, V, M, keys, values, s.sc.data(), s.p.data());
      t += count;
      continue;
    }
    GsaChunk(rows, t, n, K, V, M, s, keys, values);
    t += n;
  }
}

}  // namespace abcd
