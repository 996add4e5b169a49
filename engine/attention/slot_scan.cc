#include "engine/attention/slot_scan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

constexpr int kLanes = 8;  // partial sums of a dot product (the vector width the clones fill)

// One slot: row = fold(row, x, w); returns q . row (eight lanes, added pairwise as cpu::Dot).
inline float FoldRowDot(SlotFold fold, const float* x, float w, const float* q, int dim,
                        float* row) {
  float lanes[kLanes] = {};
  const int whole = dim - dim % kLanes;
  if (fold == SlotFold::kMean) {
    for (int c = 0; c < whole; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        row[c + l] += w * (x[c + l] - row[c + l]);
        lanes[l] += q[c + l] * row[c + l];
      }
    }
    for (int c = whole; c < dim; ++c) {
      row[c] += w * (x[c] - row[c]);
      lanes[0] += q[c] * row[c];
    }
  } else {
    const float keep = 1.0f - w;
    for (int c = 0; c < whole; c += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        row[c + l] = w * row[c + l] + keep * x[c + l];
        lanes[l] += q[c + l] * row[c + l];
      }
    }
    for (int c = whole; c < dim; ++c) {
      row[c] = w * row[c] + keep * x[c];
      lanes[0] += q[c] * row[c];
    }
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

}  // namespace

ABCD_VECTOR_CLONES void FoldSlotsAndScore(SlotFold fold, const float* x, const float* w,
                                          const float* q, int slots, int dim, float* rows,
                                          float* scores) {
  for (int j = 0; j < slots; ++j) {
    scores[j] = FoldRowDot(fold, x, w[j], q, dim, rows + static_cast<int64_t>(j) * dim);
  }
}

ABCD_VECTOR_CLONES void FoldSlotsAndMix(SlotFold fold, const float* x, const float* w,
                                        const float* p, int slots, int dim, float* rows,
                                        float* out) {
  for (int c = 0; c < dim; ++c) out[c] = 0.0f;
  for (int j = 0; j < slots; ++j) {
    float* row = rows + static_cast<int64_t>(j) * dim;
    const float wj = w[j], pj = p[j];
    if (fold == SlotFold::kMean) {
      for (int c = 0; c < dim; ++c) {
        row[c] += wj * (x[c] - row[c]);
        out[c] += pj * row[c];
      }
    } else {
      const float keep = 1.0f - wj;
      for (int c = 0; c < dim; ++c) {
        row[c] = wj * row[c] + keep * x[c];
        out[c] += pj * row[c];
      }
    }
  }
}

bool SlotSoftmax(const float* scores, const float* live, int slots, float* p) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float max_score = kNegInf;
  for (int j = 0; j < slots; ++j) {
    const bool alive = live == nullptr || live[j] != kNegInf;
    p[j] = alive ? scores[j] : kNegInf;
    max_score = std::max(max_score, p[j]);
  }
  if (max_score == kNegInf) {
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
