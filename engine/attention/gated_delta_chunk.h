// The gated delta rule (GatedDeltaState, gated_delta_state.h) of one value head over a run of
// consecutive rows of one sequence, with the row's decay a_t = exp(g_t) (one per head) and beta_t:
//   S = a_t (I - beta_t k_t k_t^T) S + beta_t k_t v_t^T,   y_t = S^T q_t
// in two forms with the same results within float tolerance:
//   GatedDeltaRowScan    row by row (GatedDeltaFoldRow: two passes over S per row);
//   GatedDeltaChunkScan  fla's chunk_gated_delta_rule (the WY representation of
//                        fla/ops/gated_delta_rule/{naive,wy_fast,chunk}.py and
//                        common/chunk_delta_h.py): rows in chunks of up to 64; with b_t the
//                        cumulative log decay from the chunk's start and S0 its first state,
//                          A   = strictly lower (beta_t e^(b_t - b_s) k_t . k_s),
//                          T   = (I + A)^-1 (forward substitution),
//                          V'  = T diag(beta) V - T diag(beta e^b) K S0   (the new values),
//                          Y   = diag(e^b) Q S0 + ((Q K^T) . e^(b_t - b_s), s <= t) V',
//                          S   = e^(b_last) S0 + (K . e^(b_last - b_s))^T V',
//                        all small matrix products (ChunkMulAcc, gated_linear_chunk.h), so S is
//                        read a few times per chunk instead of twice per row.
// Cumulative log decays within a chunk stay within 60 (e^-60, far from float underflow): a chunk
// ends early where the next row would pass that, and a row that alone decays further (a state
// reset) runs by the row scan, as in gated_linear_chunk.h. GatedDeltaState::ScanHead uses the
// chunk form for runs of kGatedDeltaChunkMinRows rows and more of heads with
// K V >= kGatedDeltaChunkMinStateFloats.
// Thread-safety: stateless functions; each call uses this thread's scratch buffers.
#pragma once

#include <cstdint>

namespace abcd {

// One value head's rows: row t's q at q + t * stride (k, v, decay, beta likewise; decay and beta
// point at the head's one float), its read at out + t * out_stride (V floats, overwritten).
struct GatedDeltaHeadRows {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* decay = nullptr;  // exp(g) in [0, 1]
  const float* beta = nullptr;
  int64_t stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
};

// Where the chunk form pays (timed on Zen 4, one head's 512-row run, thread CPU time,
// DISABLED_Timing in gated_delta_chunk_test.cc): K 256 V 512 (the fla 1.3B heads) 3.2x faster
// than the row scan, 128 x 256 3.5x, 128 x 128 3.0x, 64 x 64 1.8x, 32 x 64 1.1x, 16 x 32 0.33x
// (there the products are too small to pay for the chunk's fixed work).
inline constexpr int64_t kGatedDeltaChunkMinRows = 32;
inline constexpr int64_t kGatedDeltaChunkMinStateFloats = 4096;  // K V

// One row: v' = beta (v - decay S^T k), S = decay S + k v'^T, and with `read` (may be null)
// out = S^T read of the new S. S [key_dim, value_dim] row-major, updated in place.
void GatedDeltaFoldRow(const float* k, const float* v, float decay, float beta, const float* read,
                       int key_dim, int value_dim, float* S, float* out);

// S [key_dim, value_dim] row-major, updated in place.
void GatedDeltaRowScan(const GatedDeltaHeadRows& rows, int key_dim, int value_dim, float* S);
void GatedDeltaChunkScan(const GatedDeltaHeadRows& rows, int key_dim, int value_dim, float* S);

}  // namespace abcd
