#include <algorithm>
#include <cmath>

#include "engine/core/parallel_row_ranges.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd::cpu {

namespace {

// A batch of fewer values stays on the caller: handing it to the pool's threads costs about as
// much as normalising (or adding) a few thousand values.
constexpr int64_t kElementwiseSplitMinValues = 16384;

void LayerNormRows(const float* x, int64_t rows, int64_t d, const float* gamma, const float* beta,
                   float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * d;
    float* out = y + r * d;
    double mean = 0.0;
    for (int64_t i = 0; i < d; ++i) mean += in[i];
    mean /= static_cast<double>(d);
    double var = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      const double c = in[i] - mean;
      var += c * c;
    }
    var /= static_cast<double>(d);
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    const float m = static_cast<float>(mean);
    for (int64_t i = 0; i < d; ++i) out[i] = (in[i] - m) * inv * gamma[i] + beta[i];
  }
}

void RmsNormRows(const float* x, int64_t rows, int64_t d, const float* gamma, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * d;
    float* out = y + r * d;
    double sum = 0.0;
    for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(in[i]) * in[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(d) + eps));
    for (int64_t i = 0; i < d; ++i) out[i] = in[i] * inv * gamma[i];
  }
}

}  // namespace

void LayerNorm(const float* x, int64_t rows, int64_t d, const float* gamma, const float* beta,
               float eps, float* y, ThreadPool* pool) {
  ParallelRowRanges(pool, rows, d, kElementwiseSplitMinValues, [&](int64_t first, int64_t count) {
    LayerNormRows(x + first * d, count, d, gamma, beta, eps, y + first * d);
  });
}

void RmsNorm(const float* x, int64_t rows, int64_t d, const float* gamma, float eps, float* y,
             ThreadPool* pool) {
  ParallelRowRanges(pool, rows, d, kElementwiseSplitMinValues, [&](int64_t first, int64_t count) {
    RmsNormRows(x + first * d, count, d, gamma, eps, y + first * d);
  });
}

void SiluInPlace(float* x, int64_t n) { SiluArray(x, n); }

namespace {

void SwiGluRows(const float* gate_up, int64_t rows, int64_t ff, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    SiluGateArray(gate_up + r * 2 * ff, gate_up + r * 2 * ff + ff, ff, out + r * ff);
  }
}

}  // namespace

void SwiGlu(const float* gate_up, int64_t rows, int64_t ff, float* out, ThreadPool* pool) {
  if (pool == nullptr || pool->size() == 1 || rows * ff <= 4096) {
    SwiGluRows(gate_up, rows, ff, out);
    return;
  }
  if (rows >= pool->size()) {
    pool->ParallelFor(rows,
                      [&](int64_t r) { SwiGluRows(gate_up + r * 2 * ff, 1, ff, out + r * ff); });
    return;
  }
  // Few wide rows (batch-1 decode): split each row's columns.
  constexpr int64_t kChunk = 2048;
  const int64_t chunks = (ff + kChunk - 1) / kChunk;
  pool->ParallelFor(rows * chunks, [&](int64_t t) {
    const int64_t r = t / chunks, first = (t % chunks) * kChunk, n = std::min(kChunk, ff - first);
    const float* gate = gate_up + r * 2 * ff + first;
    SiluGateArray(gate, gate + ff, n, out + r * ff + first);
  });
}

void RopeAngles(int64_t position, const float* inv_freq, int half, float* cos_sin) {
  const float p = static_cast<float>(position);
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(p * inv_freq[i]);
    cos_sin[i] = static_cast<float>(std::cos(angle));
    cos_sin[half + i] = static_cast<float>(std::sin(angle));
  }
}

void RotateHalf(float* x, int heads, int half, const float* cos_sin) {
  const float* c = cos_sin;
  const float* s = cos_sin + half;
  for (int h = 0; h < heads; ++h) {
    float* a = x + static_cast<int64_t>(h) * 2 * half;
    float* b = a + half;
    for (int i = 0; i < half; ++i) {
      const float x0 = a[i], x1 = b[i];
      a[i] = x0 * c[i] - x1 * s[i];
      b[i] = x1 * c[i] + x0 * s[i];
    }
  }
}

namespace {

ABCD_VECTOR_CLONES void ActivateRange(Activation activation, float* x, int64_t n) {
  switch (activation) {
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
      break;
    case Activation::kGelu:
      GeluErfInPlace(x, n);
      break;
    case Activation::kSwiGlu:  // gated: Model::FeedForward calls SwiGlu instead
      break;
  }
}

}  // namespace

void Activate(Activation activation, float* x, int64_t n, ThreadPool* pool) {
  constexpr int64_t kChunk = 4096;
  if (pool == nullptr || pool->size() == 1 || n <= kChunk) {
    ActivateRange(activation, x, n);
    return;
  }
  pool->ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t t) {
    ActivateRange(activation, x + t * kChunk, std::min(kChunk, n - t * kChunk));
  });
}

void AddInPlace(float* y, const float* x, int64_t n, ThreadPool* pool) {
  // Pieces of whole 16-value groups: a batch's residual rows, split like the norms' rows.
  constexpr int64_t kGroup = 16;
  ParallelRowRanges(pool, (n + kGroup - 1) / kGroup, kGroup, kElementwiseSplitMinValues,
                    [&](int64_t first, int64_t count) {
                      const int64_t begin = first * kGroup,
                                    end = std::min(n, (first + count) * kGroup);
                      for (int64_t i = begin; i < end; ++i) y[i] += x[i];
                    });
}

void AddSinusoidalPosition(int64_t position, int64_t d, float* row) {
  const double p = static_cast<double>(position);
  for (int64_t i = 0; i < d / 2; ++i) {
    const double angle =
        p / std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(d));
    row[2 * i] += static_cast<float>(std::sin(angle));
    row[2 * i + 1] += static_cast<float>(std::cos(angle));
  }
}

std::vector<double> SinusoidalDenominators(int64_t d) {
  std::vector<double> out(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i) {
    out[static_cast<size_t>(i)] =
        std::pow(10000.0, 2.0 * static_cast<double>(i) / static_cast<double>(d));
  }
  return out;
}

void AddSinusoidalPosition(int64_t position, const std::vector<double>& denominators, float* row) {
  const double p = static_cast<double>(position);
  for (size_t i = 0; i < denominators.size(); ++i) {
    const double angle = p / denominators[i];
    row[2 * i] += static_cast<float>(std::sin(angle));
    row[2 * i + 1] += static_cast<float>(std::cos(angle));
  }
}

}  // namespace abcd::cpu
