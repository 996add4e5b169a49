// GSA's slot recurrence (GsaState, gsa_state.h) for one head over a run of consecutive rows of
// one sequence, per slot m with forget gate alpha_t[m] and write weight w_t[m] = 1 - alpha_t[m]:
//   K~[m] = alpha_t[m] K~[m] + w_t[m] k_t,   V~[m] = alpha_t[m] V~[m] + w_t[m] v_t,
//   p_t = softmax_m(q_t . K~[m]),            y_t = sum_m p_t[m] V~[m]
// in two forms with the same results within float tolerance:
//   GsaRowScan    row by row (slot_scan.h's fused fold-and-read passes: the state read and
//                 written once per row);
//   GsaChunkScan  fla's chunk form (chunk_gsa: two gated linear attentions sharing the slot
//                 decays): rows in chunks of up to 64; within a chunk the scores as
//                 Q K~0^T and (Q K^T masked) times the decayed write weights, the softmax per row,
//                 then the reads as P V~0 and (P W^T masked) V, all small matrix products
//                 (ChunkMulAcc), and the memories carried between chunks
//                 (K~ = diag(exp b_n) K~0 + W^T K, V~ likewise), so the state is read a few times
//                 per chunk instead of once per row.
// Cumulative log gates within a chunk are kept within 60 in every slot (a chunk ends early
// where the next row would pass that; a row that alone passes it runs by the row scan), as in
// gated_linear_chunk.h. GsaState::ScanHead uses the chunk form for runs of kGsaChunkMinRows and
// more of heads with slots (K + V) >= kGsaChunkMinStateFloats.
// Thread-safety: stateless functions; each call uses this thread's scratch buffers.
#pragma once

#include <cstdint>

namespace abcd {

// One head's rows: row t's q at q + t * stride (k, v, alpha likewise; alpha holds the slots'
// forget gates), its read at out + t * out_stride (V floats, overwritten).
struct GsaHeadRows {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* alpha = nullptr;
  int64_t stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t rows = 0;
};

// Where the chunk form is used: the fla 1.3B gsa heads (64 slots, K = V = 512: 65,536 floats);
// timed in gsa_chunk_test.cc (DISABLED_Timing) and loadtest/results/fla-prefill.md.
inline constexpr int64_t kGsaChunkMinRows = 32;
inline constexpr int64_t kGsaChunkMinStateFloats = 32768;  // slots (K + V)

// keys [slots, key_dim] and values [slots, value_dim], row-major, updated in place.
void GsaRowScan(const GsaHeadRows& rows, int key_dim, int value_dim, int slots, float* keys,
                float* values);
void GsaChunkScan(const GsaHeadRows& rows, int key_dim, int value_dim, int slots, float* keys,
                  float* values);

}  // namespace abcd
