// GatedChunkScan (fla's chunk form of the gated linear recurrence) against GatedRowScan, the
// row-by-row scan: every read and the state after the run, at small and fla 1.3B head shapes, with
// per-channel decays, a fixed decay (retnet), decays that force short chunks and state resets
// (lambda 0 and 1e-30: the row scan takes those rows), from the empty and from a filled state,
// with rows strided as in a step's kernel rows.
#include "engine/attention/gated_linear_chunk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/attention/chunk_scan_rows.h"

namespace abcd {
namespace gated_chunk_test {
namespace {

using chunk_scan_testing::ChunkRows;
using chunk_scan_testing::ChunkThreadNanos;
using chunk_scan_testing::ExpectChunkNear;
using chunk_scan_testing::UniformGates;

// Per row: q [K] | k [K] | v [V] | lambda [K] | 5 floats of padding.
ChunkRows MakeRows(int64_t count, int K, int V, const std::function<float(int64_t)>& lambda,
                   std::mt19937& rng) {
  return chunk_scan_testing::MakeChunkRows(count, K, V, /*gates=*/K, /*padding=*/5, lambda, rng);
}

GatedHeadRows View(const ChunkRows& r, int64_t count, int K, bool fixed, float* out, int V) {
  GatedHeadRows v;
  v.q = r.data.data();
  v.k = v.q + K;
  v.v = v.k + K;
  v.lambda = fixed ? nullptr : v.v + V;
  v.fixed_decay = 0.97f;
  v.stride = r.stride;
  v.out = out;
  v.out_stride = V + 3;
  v.rows = count;
  return v;
}

void Check(int K, int V, int64_t count, bool fixed, const std::function<float(int64_t)>& lambda,
           const std::string& name) {
  SCOPED_TRACE(name + " K " + std::to_string(K) + " V " + std::to_string(V) + " rows " +
               std::to_string(count));
  std::mt19937 rng(static_cast<uint32_t>(K * 1000 + V + count));
  for (bool filled : {false, true}) {
    std::vector<float> expected_state(static_cast<size_t>(K) * V, 0.0f);
    if (filled) {
      const ChunkRows before = MakeRows(5, K, V, lambda, rng);
      std::vector<float> scratch(static_cast<size_t>(5 * (V + 3)));
      GatedRowScan(View(before, 5, K, fixed, scratch.data(), V), K, V, expected_state.data());
    }
    std::vector<float> state = expected_state;
    const ChunkRows rows = MakeRows(count, K, V, lambda, rng);
    std::vector<float> expected(static_cast<size_t>(count * (V + 3)), -7.0f);
    std::vector<float> actual = expected;
    GatedRowScan(View(rows, count, K, fixed, expected.data(), V), K, V, expected_state.data());
    GatedChunkScan(View(rows, count, K, fixed, actual.data(), V), K, V, state.data());
    ExpectChunkNear(expected, actual, filled ? "reads (filled)" : "reads");
    ExpectChunkNear(expected_state, state, filled ? "state (filled)" : "state");
  }
}

TEST(GatedLinearChunk, EqualsRowScan) {
  std::mt19937 rng(5);
  const int shapes[][2] = {{12, 10}, {64, 64}, {32, 96}, {128, 128}, {256, 512}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1];
    for (int64_t count : {4, 33, 64, 65, 200}) {
      Check(K, V, count, false, UniformGates(rng, 0.5f, 1.0f), "gla-like");
      Check(K, V, count, false, UniformGates(rng, 0.97f, 1.0f), "slow decay");
      Check(K, V, count, true, UniformGates(rng, 0.0f, 1.0f), "fixed decay");
    }
  }
}

TEST(GatedLinearChunk, ShortChunksAndResets) {
  std::mt19937 rng(9);
  // Strong decays (chunks end after a few rows), exact resets, and near-zero decays.
  Check(64, 40, 150, false, UniformGates(rng, 0.01f, 0.2f), "strong decay");
  Check(
      64, 40, 150, false, [](int64_t t) { return t % 37 == 5 ? 0.0f : 0.9f; }, "resets");
  Check(
      64, 40, 150, false, [](int64_t t) { return t % 11 == 3 ? 1e-30f : 0.95f; }, "near resets");
}

// Timing, not a check (--gtest_also_run_disabled_tests --gtest_filter='*Timing*'): one head's
// 512-row run at the bench models' and the fla 1.3B heads' shapes (gla K 256 V 512, retnet
// 256 x 512, hgrn2 128 x 128), best of 5 in thread CPU time, ns per row.
TEST(GatedLinearChunk, DISABLED_Timing) {
  std::mt19937 rng(3);
  const int shapes[][2] = {{64, 64}, {128, 128}, {256, 512}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1];
    const ChunkRows rows = MakeRows(
        512, K, V, [](int64_t) { return 0.95f; }, rng);
    std::vector<float> out(static_cast<size_t>(512 * (V + 3)));
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; ++rep) {
      for (int chunked = 0; chunked < 2; ++chunked) {
        std::vector<float> state(static_cast<size_t>(K) * V, 0.0f);
        const double start = ChunkThreadNanos();
        const GatedHeadRows view = View(rows, 512, K, false, out.data(), V);
        if (chunked == 1) {
          GatedChunkScan(view, K, V, state.data());
        } else {
          GatedRowScan(view, K, V, state.data());
        }
        best[chunked] = std::min(best[chunked], ChunkThreadNanos() - start);
      }
    }
    std::printf("K %3d V %3d: row scan %8.0f ns/row, chunks %8.0f (%.2fx)\n", K, V, best[0] / 512,
                best[1] / 512, best[0] / best[1]);
  }
}

}  // namespace
}  // namespace gated_chunk_test
}  // namespace abcd
