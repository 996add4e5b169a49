// The fused per-row kernels of the slot types' whole-run scans (AbcState and GsaState ScanHead):
// each slot row is updated and read in the same pass, so a run touches the state once per row
// instead of once for the update and once more for the read, and the dot products keep eight
// partial sums the compiler vectorises. The update arithmetic is the row-by-row one's (same
// operations, same order), so the state after a run matches UpdateHead's; the reads differ from
// ReadHead's only in the order of the softmax sums.
//
// Why not always the chunk form (intra-chunk products as matrix products, inter-chunk through
// the state): a small slot state (n x d, in L1) gains nothing from it; the chunk form's read
// still needs Q K~0^T and P V~0 (2 n d multiply-adds per row, what the recurrence's read costs)
// plus the intra-chunk terms (2 C (d + n) per row) and the rank-C state update (2 n d per row):
// more arithmetic than the recurrence, which this pass keeps at one load and store per state
// float. Where the state outgrows the cache (gsa at the fla 1.3B shapes, 64 x (512 + 512) per
// head) GsaState uses the chunk form instead (gsa_chunk.h).
// Stateless; thread-safe.
#pragma once

#include <cstdint>

namespace abcd {

// How a row r of a slot takes x with the slot's weight w:
enum class SlotFold {
  kMean,   // r += w (x - r)          (abc running means)
  kDecay,  // r = w r + (1 - w) x     (gsa forget gates)
};

// For each slot j < slots: fold x into row j (`dim` floats at rows + j * dim) with weight w[j];
// scores[j] = q . row j after the fold.
void FoldSlotsAndScore(SlotFold fold, const float* x, const float* w, const float* q, int slots,
                       int dim, float* rows, float* scores);

// For each slot j: fold x into row j with weight w[j]; out[dim] = sum_j p[j] row j (after the
// fold), overwriting out.
void FoldSlotsAndMix(SlotFold fold, const float* x, const float* w, const float* p, int slots,
                     int dim, float* rows, float* out);

// p = softmax of scores over the slots j with live == null or live[j] > -inf (log-normalisers;
// the others get 0). Returns false (p all 0) when no slot is live.
bool SlotSoftmax(const float* scores, const float* live, int slots, float* p);

}  // namespace abcd
