// GsaChunkScan (fla's chunk form of GSA's slot recurrence) against GsaRowScan, the row-by-row
// scan GsaState::ScanHead used alone before: every read and both memories after the run, at small
// and the fla 1.3B head shapes (64 slots, K = V = 512), with typical gates, slow gates, gates that
// force short chunks and resets (alpha 0 and 1e-30: the row scan takes those rows), from the
// empty and from a filled state, with rows strided as in a step's kernel rows.
#include "engine/attention/gsa_chunk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/attention/chunk_scan_rows.h"

namespace abcd {
namespace gsa_chunk_test {
namespace {

using chunk_scan_testing::ChunkRows;
using chunk_scan_testing::ChunkThreadNanos;
using chunk_scan_testing::ExpectChunkNear;
using chunk_scan_testing::UniformGates;

// Per row: q [K] | k [K] | v [V] | alpha [M] | 3 floats of padding.
ChunkRows MakeGsaRows(int64_t count, int K, int V, int M,
                      const std::function<float(int64_t)>& alpha, std::mt19937& rng) {
  return chunk_scan_testing::MakeChunkRows(count, K, V, /*gates=*/M, /*padding=*/3, alpha, rng);
}

GsaHeadRows GsaView(const ChunkRows& r, int64_t count, int K, int V, float* out) {
  GsaHeadRows v;
  v.q = r.data.data();
  v.k = v.q + K;
  v.v = v.k + K;
  v.alpha = v.v + V;
  v.stride = r.stride;
  v.out = out;
  v.out_stride = V + 3;
  v.rows = count;
  return v;
}

void CheckGsa(int K, int V, int M, int64_t count, const std::function<float(int64_t)>& alpha,
              const std::string& name) {
  SCOPED_TRACE(name + " K " + std::to_string(K) + " V " + std::to_string(V) + " slots " +
               std::to_string(M) + " rows " + std::to_string(count));
  std::mt19937 rng(static_cast<uint32_t>(K * 1000 + V * 7 + M + count));
  for (bool filled : {false, true}) {
    std::vector<float> expected_keys(static_cast<size_t>(M) * K, 0.0f);
    std::vector<float> expected_values(static_cast<size_t>(M) * V, 0.0f);
    if (filled) {
      const ChunkRows before = MakeGsaRows(5, K, V, M, alpha, rng);
      std::vector<float> scratch(static_cast<size_t>(5 * (V + 3)));
      GsaRowScan(GsaView(before, 5, K, V, scratch.data()), K, V, M, expected_keys.data(),
                 expected_values.data());
    }
    std::vector<float> keys = expected_keys, values = expected_values;
    const ChunkRows rows = MakeGsaRows(count, K, V, M, alpha, rng);
    std::vector<float> expected(static_cast<size_t>(count * (V + 3)), -7.0f);
    std::vector<float> actual = expected;
    GsaRowScan(GsaView(rows, count, K, V, expected.data()), K, V, M, expected_keys.data(),
               expected_values.data());
    GsaChunkScan(GsaView(rows, count, K, V, actual.data()), K, V, M, keys.data(), values.data());
    ExpectChunkNear(expected, actual, filled ? "reads (filled)" : "reads");
    ExpectChunkNear(expected_keys, keys, filled ? "keys (filled)" : "keys");
    ExpectChunkNear(expected_values, values, filled ? "values (filled)" : "values");
  }
}

TEST(GsaChunk, EqualsRowScan) {
  std::mt19937 rng(5);
  const int shapes[][3] = {{12, 10, 5}, {64, 64, 16}, {32, 96, 64}, {100, 40, 33}, {512, 512, 64}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1], M = shape[2];
    for (int64_t count : {4, 33, 64, 65, 200}) {
      CheckGsa(K, V, M, count, UniformGates(rng, 0.8f, 1.0f), "gsa-like");
      CheckGsa(K, V, M, count, UniformGates(rng, 0.99f, 1.0f), "slow gates");
    }
  }
}

TEST(GsaChunk, ShortChunksAndResets) {
  std::mt19937 rng(9);
  // Strong gates (chunks end after a few rows), exact resets, and near-zero gates.
  CheckGsa(64, 40, 16, 150, UniformGates(rng, 0.01f, 0.3f), "strong gates");
  CheckGsa(
      64, 40, 16, 150, [](int64_t t) { return t % 37 == 5 ? 0.0f : 0.9f; }, "resets");
  CheckGsa(
      64, 40, 16, 150, [](int64_t t) { return t % 11 == 3 ? 1e-30f : 0.95f; }, "near resets");
}

// Timing, not a check (--gtest_also_run_disabled_tests --gtest_filter='GsaChunk.DISABLED_*'):
// one head's 512-row run at the bench models' head (K V 64, 32 slots), a middle one and the
// fla 1.3B gsa head (K V 512, 64 slots), best of 5 in thread CPU time, ns per row.
TEST(GsaChunk, DISABLED_Timing) {
  std::mt19937 rng(3);
  const int shapes[][3] = {{64, 64, 32}, {128, 128, 64}, {256, 256, 64}, {512, 512, 64}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1], M = shape[2];
    const ChunkRows rows = MakeGsaRows(
        512, K, V, M, [](int64_t) { return 0.92f; }, rng);
    std::vector<float> out(static_cast<size_t>(512 * (V + 3)));
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; ++rep) {
      for (int chunked = 0; chunked < 2; ++chunked) {
        std::vector<float> keys(static_cast<size_t>(M) * K, 0.0f);
        std::vector<float> values(static_cast<size_t>(M) * V, 0.0f);
        const GsaHeadRows view = GsaView(rows, 512, K, V, out.data());
        const double start = ChunkThreadNanos();
        if (chunked == 1) {
          GsaChunkScan(view, K, V, M, keys.data(), values.data());
        } else {
          GsaRowScan(view, K, V, M, keys.data(), values.data());
        }
        best[chunked] = std::min(best[chunked], ChunkThreadNanos() - start);
      }
    }
    std::printf("K %3d V %3d slots %2d: row scan %8.0f ns/row, chunks %8.0f (%.2fx)\n", K, V, M,
                best[0] / 512, best[1] / 512, best[0] / best[1]);
  }
}

}  // namespace
}  // namespace gsa_chunk_test
}  // namespace abcd
