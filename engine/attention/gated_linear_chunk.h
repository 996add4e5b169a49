// The gated linear recurrence of one head over a run of consecutive rows of one sequence
// (GatedLinearState: gla, retnet, hgrn2), S = diag(lambda_t) S + k_t v_t^T, y_t = S^T q_t, in
// two forms with the same results within float tolerance:
//   GatedRowScan     row by row, one pass over S per row (decay, add, read);
//   GatedChunkScan   fla's chunk form: rows in chunks of up to 64, within a chunk the reads as
//                    small matrix products (Q S0, the decay-masked Q K^T, A V) and the state
//                    carried between chunks (S = diag(exp b_n) S0 + K^ V), so S is read about
//                    rows / 8 times per chunk instead of read and written once per row.
// The chunk form keeps the cumulative log decays b_t of a chunk within 60 (e^-60) in every key
// channel: a chunk ends early where the next row would pass that, and a row that alone decays
// further (a state reset) runs by the row scan. GatedLinearState uses it for runs of
// kGatedChunkMinRows rows and more of heads with K V >= kGatedChunkMinStateFloats (gla and
// retnet at the fla 1.3B shapes: K 256, V 512).
// Thread-safety: stateless functions; each call uses this thread's scratch buffers.
#pragma once

#include <cstdint>

namespace abcd {

// One head's rows: row t's q at q + t * stride (k, v, lambda likewise), its read at
// out + t * out_stride. lambda == nullptr: every channel decays by fixed_decay (retnet).
struct GatedHeadRows {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* lambda = nullptr;
  float fixed_decay = 1.0f;
  int64_t stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
};

// Where the chunk form pays (timed on Zen 4, one head's 512-row run, DISABLED_Timing in
// gated_linear_chunk_test.cc): K 256 V 512 6.9x faster than the row scan; K V 128 x 128 0.74x
// and 64 x 64 0.3x (S fits the L1/L2 cache there, and the chunk form does 1.5x the
// multiply-adds), so those keep the row scan.
inline constexpr int64_t kGatedChunkMinRows = 32;
inline constexpr int64_t kGatedChunkMinStateFloats = 32768;  // K V

// y[r, j] += sum_i x[r, i] b[i, j] for r < rows, j < cols (row strides xs, bs, ys), in
// register tiles of 8 rows by 32 columns, each row of b read once per tile: the chunk forms'
// small products (here and gsa_chunk.h).
void ChunkMulAcc(const float* x, int64_t xs, int rows, int inner, const float* b, int64_t bs,
                 int cols, float* y, int64_t ys);

// S [key_dim, value_dim] row-major, updated in place.
void GatedRowScan(const GatedHeadRows& rows, int key_dim, int value_dim, float* S);
void GatedChunkScan(const GatedHeadRows& rows, int key_dim, int value_dim, float* S);

}  // namespace abcd
