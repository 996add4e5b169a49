// What the chunk-scan tests share (gated_linear_chunk_test.cc, gsa_chunk_test.cc,
// gated_delta_chunk_test.cc: a chunk form
// against its row-by-row scan): random kernel rows strided as in a step, the closeness check of
// reads and states, and the thread CPU clock of their disabled timing tests.
//
// Thread-safety: test-only; the gtest thread.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace abcd::chunk_scan_testing {

// Kernel rows of one head: per row q [K] | k [K] | v [V] | gates [gates] | `padding` floats.
struct ChunkRows {
  std::vector<float> data;
  int64_t stride = 0;
};

// `count` rows: q, k and v standard normal from `rng` (row by row), every gate of row t
// `gate(t)`.
inline ChunkRows MakeChunkRows(int64_t count, int K, int V, int gates, int padding,
                               const std::function<float(int64_t)>& gate, std::mt19937& rng) {
  ChunkRows r;
  r.stride = 2 * int64_t{K} + V + gates + padding;
  r.data.resize(static_cast<size_t>(count * r.stride));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t t = 0; t < count; ++t) {
    float* row = r.data.data() + t * r.stride;
    for (int64_t i = 0; i < 2 * int64_t{K} + V; ++i) row[i] = normal(rng);
    for (int g = 0; g < gates; ++g) row[2 * K + V + g] = gate(t);
  }
  return r;
}

// A gate that draws from U[lo, hi) with `rng` at each call.
inline std::function<float(int64_t)> UniformGates(std::mt19937& rng, float lo, float hi) {
  return [&rng, lo, hi](int64_t) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
}

// Fails (at most 5 messages naming `what` and the index) where `actual` is not `expected`
// within 1e-4 of each value and `largest_tolerance` of the largest: a read is a sum of K V
// products, and where they cancel the summation order alone moves it by a few ulps of the
// largest term.
inline void ExpectChunkNear(const std::vector<float>& expected, const std::vector<float>& actual,
                            const std::string& what, float largest_tolerance = 1e-6f) {
  ASSERT_EQ(expected.size(), actual.size());
  float largest = 0.0f;
  for (float a : expected) largest = std::max(largest, std::fabs(a));
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float a = expected[i], b = actual[i];
    if (!(std::fabs(a - b) <= 1e-4f * (1.0f + std::fabs(a)) + largest_tolerance * largest) &&
        reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: " << a << " vs " << b;
    }
  }
}

// This thread's CPU time in nanoseconds.
inline double ChunkThreadNanos() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e9 * static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec);
}

}  // namespace abcd::chunk_scan_testing
