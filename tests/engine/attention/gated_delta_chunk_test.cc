// GatedDeltaChunkScan (fla's chunk form of the gated delta rule, WY representation) against
// GatedDeltaRowScan, the row-by-row scan: every read and the state after the run, at small and fla
// 1.3B head shapes, for runs across several chunk boundaries, with slow, strong and exact-1 decays,
// decays that end chunks early and state resets (decay 0 and 1e-30: the row scan takes those
// rows), beta at its 0 / 1 edges and in (0, 2) (allow_neg_eigval), from the empty and from a
// filled state, with rows strided as in a step's kernel rows; and GatedDeltaState::ScanHead (which
// picks the chunk form at its shapes) against the row-by-row default with GVA.
#include "engine/attention/gated_delta_chunk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/attention/gated_delta_state.h"
#include "tests/engine/attention/chunk_scan_rows.h"

namespace abcd {
namespace gated_delta_chunk_test {
namespace {

// Per row t: decay and beta.
using RowGate = std::function<float(int64_t)>;

struct Rows {
  // per row: q [K] | k [K] | v [V] | decay | beta | 3 floats of padding
  std::vector<float> data;
  int64_t stride = 0;
};

// q normal, k normal then L2-normalised (as GatedDeltaState::PrepareRows leaves it), v normal.
Rows MakeRows(int64_t count, int K, int V, const RowGate& decay, const RowGate& beta,
              std::mt19937& rng) {
  Rows r;
  r.stride = 2 * int64_t{K} + V + 5;
  r.data.resize(static_cast<size_t>(count * r.stride));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t t = 0; t < count; ++t) {
    float* row = r.data.data() + t * r.stride;
    for (int64_t i = 0; i < 2 * int64_t{K} + V; ++i) row[i] = normal(rng);
    float sum = 0.0f;
    for (int c = 0; c < K; ++c) sum += row[K + c] * row[K + c];
    for (int c = 0; c < K; ++c) row[K + c] /= std::sqrt(sum + 1e-6f);
    row[2 * K + V] = decay(t);
    row[2 * K + V + 1] = beta(t);
  }
  return r;
}

GatedDeltaHeadRows View(const Rows& r, int64_t count, int K, int V, float* out) {
  GatedDeltaHeadRows v;
  v.q = r.data.data();
  v.k = v.q + K;
  v.v = v.k + K;
  v.decay = v.v + V;
  v.beta = v.decay + 1;
  v.stride = r.stride;
  v.out = out;
  v.out_stride = V + 3;
  v.rows = count;
  return v;
}

// Reads and states within 1e-4 of each value and 1e-5 of the largest.
void ExpectNear(const std::vector<float>& expected, const std::vector<float>& actual,
                const std::string& what) {
  chunk_scan_testing::ExpectChunkNear(expected, actual, what, /*largest_tolerance=*/1e-5f);
}

void Check(int K, int V, int64_t count, const RowGate& decay, const RowGate& beta,
           const std::string& name) {
  SCOPED_TRACE(name + " K " + std::to_string(K) + " V " + std::to_string(V) + " rows " +
               std::to_string(count));
  std::mt19937 rng(static_cast<uint32_t>(K * 1000 + V + count));
  for (bool filled : {false, true}) {
    std::vector<float> expected_state(static_cast<size_t>(K) * V, 0.0f);
    if (filled) {
      const Rows before = MakeRows(
          9, K, V, [](int64_t) { return 0.9f; }, [](int64_t) { return 0.7f; }, rng);
      std::vector<float> scratch(static_cast<size_t>(9 * (V + 3)));
      GatedDeltaRowScan(View(before, 9, K, V, scratch.data()), K, V, expected_state.data());
    }
    std::vector<float> state = expected_state;
    const Rows rows = MakeRows(count, K, V, decay, beta, rng);
    std::vector<float> expected(static_cast<size_t>(count * (V + 3)), -7.0f);
    std::vector<float> actual = expected;
    GatedDeltaRowScan(View(rows, count, K, V, expected.data()), K, V, expected_state.data());
    GatedDeltaChunkScan(View(rows, count, K, V, actual.data()), K, V, state.data());
    ExpectNear(expected, actual, filled ? "reads (filled)" : "reads");
    ExpectNear(expected_state, state, filled ? "state (filled)" : "state");
  }
}

using chunk_scan_testing::UniformGates;

TEST(GatedDeltaChunk, EqualsRowScan) {
  std::mt19937 rng(5);
  const int shapes[][2] = {{12, 10}, {64, 64}, {32, 96}, {256, 512}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1];
    for (int64_t count : {1, 4, 33, 64, 65, 200}) {
      Check(K, V, count, UniformGates(rng, 0.5f, 1.0f), UniformGates(rng, 0.0f, 1.0f),
            "decay 0.5-1");
      Check(K, V, count, UniformGates(rng, 0.97f, 1.0f), UniformGates(rng, 0.0f, 2.0f),
            "slow, beta < 2");
    }
  }
}

TEST(GatedDeltaChunk, BetaEdgesAndNoDecay) {
  std::mt19937 rng(7);
  const RowGate one = [](int64_t) { return 1.0f; };
  // beta 1 everywhere (k's old value replaced exactly), 0 everywhere (nothing written), and a
  // mix of both; decay exactly 1 (a plain delta rule).
  Check(48, 40, 150, UniformGates(rng, 0.8f, 1.0f), one, "beta 1");
  Check(
      48, 40, 150, UniformGates(rng, 0.8f, 1.0f), [](int64_t) { return 0.0f; }, "beta 0");
  Check(
      48, 40, 150, one, [](int64_t t) { return t % 3 == 0 ? 0.0f : 1.0f; }, "beta 0/1, decay 1");
  // The same key written again at once with beta 1: the second write replaces the first.
  Check(16, 24, 130, one, one, "decay 1, beta 1");
}

TEST(GatedDeltaChunk, ShortChunksAndResets) {
  std::mt19937 rng(9);
  const RowGate half = [](int64_t) { return 0.5f; };
  // Strong decays (chunks end after a few rows), exact resets, near-zero decays, and decays that
  // alone pass the chunk's bound (e^-60).
  Check(64, 40, 150, UniformGates(rng, 0.01f, 0.2f), UniformGates(rng, 0.0f, 1.0f), "strong decay");
  Check(
      64, 40, 150, [](int64_t t) { return t % 37 == 5 ? 0.0f : 0.9f; }, half, "resets");
  Check(
      64, 40, 150, [](int64_t t) { return t % 11 == 3 ? 1e-30f : 0.95f; }, half, "near resets");
  Check(
      64, 40, 150, [](int64_t t) { return t % 2 == 0 ? 1e-20f : 0.99f; }, half, "e^-46 rows");
}

// GatedDeltaState::ScanHead at the chunk form's shapes (K V >= kGatedDeltaChunkMinStateFloats),
// two value heads sharing one q/k head, a run of kGatedDeltaChunkMinRows rows and more after
// rows of another sequence: against the row-by-row default (UpdateHead then ReadHead).
TEST(GatedDeltaChunk, ScanHeadEqualsRowByRow) {
  GatedDeltaState::Options o;
  o.heads = 2;
  o.kv_heads = 1;
  o.key_dim = 128;
  o.value_dim = 256;
  o.a_log = {0.0f, 0.5f};
  o.dt_bias = {0.1f, -0.2f};
  o.norm_weight.assign(256, 1.0f);
  ASSERT_GE(int64_t{o.key_dim} * o.value_dim, kGatedDeltaChunkMinStateFloats);
  const auto state = std::make_shared<GatedDeltaState>(o);
  const KernelRowLayout layout = state->PreparedLayout();
  const int64_t width = state->PreparedWidth();
  const int64_t out_width = int64_t{o.heads} * o.value_dim;
  std::mt19937 rng(11);
  for (int64_t count : {int64_t{kGatedDeltaChunkMinRows}, int64_t{150}}) {
    SCOPED_TRACE("a run of " + std::to_string(count));
    constexpr int64_t kLead = 3;  // rows of another sequence before the run
    const int64_t total = kLead + count;
    // Prepared rows: q | k | v | decay [2] | beta [2] | gate [2 V] (the gate is FinishRows').
    std::vector<float> rows(static_cast<size_t>(total * width));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t r = 0; r < total; ++r) {
      float* row = rows.data() + r * width;
      for (int64_t i = 0; i < width; ++i) row[i] = normal(rng);
      float sum = 0.0f;
      for (int c = 0; c < o.key_dim; ++c) sum += row[layout.k + c] * row[layout.k + c];
      for (int c = 0; c < o.key_dim; ++c) row[layout.k + c] /= std::sqrt(sum + 1e-6f);
      for (int h = 0; h < o.heads; ++h) {
        row[layout.extra + h] = std::uniform_real_distribution<float>(0.6f, 1.0f)(rng);
        row[layout.extra + o.heads + h] = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
      }
    }
    std::vector<float> outs[2], fixed[2];
    for (int by_default = 0; by_default < 2; ++by_default) {
      fixed[by_default].resize(static_cast<size_t>(state->FixedFloats()));
      state->Init(fixed[by_default].data());
      std::vector<StateRef> states(static_cast<size_t>(total));
      for (int64_t r = 0; r < total; ++r) {
        states[static_cast<size_t>(r)] = {fixed[by_default].data(), nullptr, r - kLead, nullptr};
      }
      outs[by_default].assign(static_cast<size_t>(total * out_width), -7.0f);
      const RowRun run{kLead, count};
      ScanArgs args;
      args.rows = rows.data();
      args.width = width;
      args.layout = layout;
      args.states = states;
      args.runs = std::span<const RowRun>(&run, 1);
      args.out = outs[by_default].data();
      args.out_width = out_width;
      for (int h = 0; h < o.heads; ++h) {
        if (by_default == 1) {
          state->AttentionState::ScanHead(h, args, run);
        } else {
          state->ScanHead(h, args, run);
        }
      }
    }
    ExpectNear(outs[1], outs[0], "reads");
    ExpectNear(fixed[1], fixed[0], "state");
  }
}

using chunk_scan_testing::ChunkThreadNanos;

// Timing, not a check (--gtest_also_run_disabled_tests --gtest_filter='GatedDeltaChunk.*Timing'):
// one head's 512-row run at the bench models' shape (64 x 64), 128 x 128, 128 x 256 and the fla
// 1.3B heads' (K 256, V 512), best of 5 in thread CPU time, ns per row.
TEST(GatedDeltaChunk, DISABLED_Timing) {
  std::mt19937 rng(3);
  const int shapes[][2] = {{16, 32}, {32, 64}, {64, 64}, {128, 128}, {128, 256}, {256, 512}};
  for (const auto& shape : shapes) {
    const int K = shape[0], V = shape[1];
    const Rows rows = MakeRows(
        512, K, V, [](int64_t) { return 0.95f; }, [](int64_t) { return 0.5f; }, rng);
    std::vector<float> out(static_cast<size_t>(512 * (V + 3)));
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 5; ++rep) {
      for (int chunked = 0; chunked < 2; ++chunked) {
        std::vector<float> state(static_cast<size_t>(K) * V, 0.0f);
        const double start = ChunkThreadNanos();
        const GatedDeltaHeadRows view = View(rows, 512, K, V, out.data());
        if (chunked == 1) {
          GatedDeltaChunkScan(view, K, V, state.data());
        } else {
          GatedDeltaRowScan(view, K, V, state.data());
        }
        best[chunked] = std::min(best[chunked], ChunkThreadNanos() - start);
      }
    }
    std::printf("K %3d V %3d: row scan %8.0f ns/row, chunks %8.0f (%.2fx)\n", K, V, best[0] / 512,
                best[1] / 512, best[0] / best[1]);
  }
}

}  // namespace
}  // namespace gated_delta_chunk_test
}  // namespace abcd
