#include "engine/attention/slot_scan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

// Partial sums of a dot product (one vector of the AVX2 clone; the slots' chains overlap) and
// the register-held columns of an accumulated output row.
constexpr int kLanes = 8;
constexpr int kColumnBlock = 32;

inline float Fold(SlotFold fold, float row, float x, float w) {
  return fold == SlotFold::kMean ? row + w * (x - row) : w * row + (1.0f - w) * x;
}

// One slot: row = fold(row, x, w); returns q . row (kLanes partial sums added pairwise).
inline float FoldRowDot(SlotFold fold, const float* x, float w, const float* q, int dim,
                        float* row) {
  float lanes[kLanes] = {};
  const int whole = dim - dim % kLanes;
  for (int c = 0; c < whole; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      row[c + l] = Fold(fold, row[c + l], x[c + l], w);
      lanes[l] += q[c + l] * row[c + l];
    }
  }
  for (int c = whole; c < dim; ++c) {
    row[c] = Fold(fold, row[c], x[c], w);
    lanes[0] += q[c] * row[c];
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

ABCD_VECTOR_CLONES void FoldSlotsAndScore(SlotFold fold, const float* x, const float* w,
                                          const float* q, int slots, int dim, float* rows,
                                          float* scores) {
  if (fold == SlotFold::kMean) {
    for (int j = 0; j < slots; ++j) {
      scores[j] =
          FoldRowDot(SlotFold::kMean, x, w[j], q, dim, rows + static_cast<int64_t>(j) * dim);
    }
  } else {
    for (int j = 0; j < slots; ++j) {
      scores[j] =
          FoldRowDot(SlotFold::kDecay, x, w[j], q, dim, rows + static_cast<int64_t>(j) * dim);
    }
  }
}

ABCD_VECTOR_CLONES void FoldSlotsAndMix(SlotFold fold, const float* x, const float* w,
                                        const float* p, int slots, int dim, float* rows,
                                        float* out) {
  // Columns in blocks held in registers across the slots: out[c] = sum_j p[j] row_j[c], j in
  // order.
  int c0 = 0;
  for (; c0 + kColumnBlock <= dim; c0 += kColumnBlock) {
    float acc[kColumnBlock] = {}, xb[kColumnBlock];
    for (int l = 0; l < kColumnBlock; ++l) xb[l] = x[c0 + l];
    for (int j = 0; j < slots; ++j) {
      float* row = rows + static_cast<int64_t>(j) * dim + c0;
      const float wj = w[j], pj = p[j];
      if (fold == SlotFold::kMean) {
        for (int l = 0; l < kColumnBlock; ++l) {
          row[l] = Fold(SlotFold::kMean, row[l], xb[l], wj);
          acc[l] += pj * row[l];
        }
      } else {
        for (int l = 0; l < kColumnBlock; ++l) {
          row[l] = Fold(SlotFold::kDecay, row[l], xb[l], wj);
          acc[l] += pj * row[l];
        }
      }
    }
    for (int l = 0; l < kColumnBlock; ++l) out[c0 + l] = acc[l];
  }
  for (int c = c0; c < dim; ++c) out[c] = 0.0f;
  for (int j = 0; j < slots && c0 < dim; ++j) {
    float* row = rows + static_cast<int64_t>(j) * dim;
    for (int c = c0; c < dim; ++c) {
      row[c] = Fold(fold, row[c], x[c], w[j]);
      out[c] += p[j] * row[c];
    }
  }
}

bool SlotSoftmax(const float* scores, const float* live, int slots, float* p) {
  constexpr float kDeadSlot = -std::numeric_limits<float>::infinity();
  float max_score = kDeadSlot;
  for (int j = 0; j < slots; ++j) {
    const bool alive = live == nullptr || live[j] != kDeadSlot;
    p[j] = alive ? scores[j] : kDeadSlot;
    max_score = std::max(max_score, p[j]);
  }
  if (max_score == kDeadSlot) {
    for (int j = 0; j < slots; ++j) p[j] = 0.0f;
    return false;
  }
  for (int j = 0; j < slots; ++j) p[j] -= max_score;
  cpu::ExpArray(p, slots, p);  // exp(-inf) = 0: the dead slots
  float total = 0.0f;
  for (int j = 0; j < slots; ++j) total += p[j];
  const float inverse = 1.0f / total;
  for (int j = 0; j < slots; ++j) p[j] *= inverse;
  return true;
}

}  // namespace abcd
