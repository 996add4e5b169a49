// The whole-run ScanHead overrides (abc learned controls, gsa, linear rfa/t2r/elu, gated linear
// gla/retnet, sliding windows) against the row-by-row default (AttentionState::ScanHead: UpdateHead
// then ReadHead per row): every read and the state after the run, for runs of 1, 2, 63, 64, 65 and
// 300 rows, starting from the empty state and from one already holding rows, at a run offset inside
// the step's rows.
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

#include "engine/attention/abc_state.h"
#include "engine/attention/gated_linear_state.h"
#include "engine/attention/gsa_chunk.h"
#include "engine/attention/gsa_state.h"
#include "engine/attention/linear_state.h"
#include "engine/attention/softmax_state.h"

namespace abcd {
namespace {

struct ScanCase {
  std::string name;
  std::shared_ptr<AttentionState> state;
  KernelRowLayout layout;
  int64_t out_width = 0;
  std::function<float(std::mt19937&)> extra;  // one extra column's value
};

// q | k | v | extra rows of d_model columns each (abc, linear).
KernelRowLayout PlainLayout(int64_t d_model, int64_t extra) {
  return {d_model, 2 * d_model, 3 * d_model, 3 * d_model + extra};
}

float Normal(std::mt19937& rng, float scale) {
  return std::normal_distribution<float>(0.0f, scale)(rng);
}

std::vector<float> RandomRows(const ScanCase& c, int64_t rows, std::mt19937& rng) {
  std::vector<float> out(static_cast<size_t>(rows * c.layout.width));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out.data() + r * c.layout.width;
    for (int64_t i = 0; i < c.layout.extra; ++i) row[i] = Normal(rng, 1.0f);
    for (int64_t i = c.layout.extra; i < c.layout.width; ++i) row[i] = c.extra(rng);
  }
  return out;
}

// Runs `rows` (the run is rows [lead, lead + count)) over `fixed` from position `start`, by the
// override or by the default.
std::vector<float> RunScan(const ScanCase& c, const std::vector<float>& rows, int64_t lead,
                           int64_t count, int64_t start, bool by_default,
                           std::vector<float>& fixed) {
  const int64_t total = lead + count;
  std::vector<StateRef> states(static_cast<size_t>(total));
  for (int64_t r = 0; r < total; ++r) {
    states[static_cast<size_t>(r)] = {fixed.data(), nullptr, start + r - lead, nullptr};
  }
  std::vector<float> out(static_cast<size_t>(total * c.out_width), -7.0f);
  const RowRun run{lead, count};
  ScanArgs args;
  args.rows = rows.data();
  args.width = c.layout.width;
  args.layout = c.layout;
  args.states = states;
  args.runs = std::span<const RowRun>(&run, 1);
  args.out = out.data();
  args.out_width = c.out_width;
  for (int h = 0; h < c.state->heads(); ++h) {
    if (by_default) {
      c.state->AttentionState::ScanHead(h, args, run);
    } else {
      c.state->ScanHead(h, args, run);
    }
  }
  return out;
}

// |a - b| <= tol (1 + |a|) everywhere, -inf matching -inf.
void ExpectNear(const std::vector<float>& expected, const std::vector<float>& actual,
                const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size());
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float a = expected[i], b = actual[i];
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b && reported++ < 5) ADD_FAILURE() << what << " [" << i << "]: " << a << " vs " << b;
      continue;
    }
    if (!(std::fabs(a - b) <= 1e-4f * (1.0f + std::fabs(a))) && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: " << a << " vs " << b;
    }
  }
}

void CheckCase(const ScanCase& c) {
  std::mt19937 rng(1234);
  for (int64_t prefix : {0, 7}) {
    for (int64_t count : {1, 2, 63, 64, 65, 300}) {
      SCOPED_TRACE(c.name + ": " + std::to_string(prefix) + " rows before, a run of " +
                   std::to_string(count));
      std::vector<float> expected_state(static_cast<size_t>(c.state->FixedFloats()));
      c.state->Init(expected_state.data());
      if (prefix > 0) {  // a state already holding rows (fed row by row)
        const std::vector<float> before = RandomRows(c, prefix, rng);
        RunScan(c, before, 0, prefix, 0, /*by_default=*/true, expected_state);
      }
      std::vector<float> state = expected_state;
      constexpr int64_t kLead = 3;  // rows of other sequences before the run
      const std::vector<float> rows = RandomRows(c, kLead + count, rng);
      const std::vector<float> expected =
          RunScan(c, rows, kLead, count, prefix, /*by_default=*/true, expected_state);
      const std::vector<float> actual = RunScan(c, rows, kLead, count, prefix, false, state);
      ExpectNear(expected, actual, "reads");
      ExpectNear(expected_state, state, "state");
    }
  }
}

float Uniform(std::mt19937& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

std::vector<float> RandomVector(int64_t n, float scale, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = Normal(rng, scale);
  return v;
}

ScanCase Abc(AbcControl control, int heads, int dh, int slots) {
  auto state = std::make_shared<AbcState>(heads, dh, slots, control);
  const int64_t d = int64_t{heads} * dh;
  return {"abc " + std::string(AbcControlName(control)) + " slots " + std::to_string(slots) +
              " dh " + std::to_string(dh),
          state, PlainLayout(d, state->ExtraColumns()), d,
          [](std::mt19937& rng) { return Normal(rng, 3.0f); }};
}

TEST(ScanHead, AbcLearnedControlsEqualRowByRow) {
  for (AbcControl control : {AbcControl::kExp, AbcControl::kSigmoid, AbcControl::kRelu}) {
    CheckCase(Abc(control, 2, 16, 5));
    CheckCase(Abc(control, 3, 20, 70));  // two slot chunks, a head_dim with a tail
  }
}

TEST(ScanHead, AbcOtherControlsKeepTheDefault) {
  CheckCase(Abc(AbcControl::kRandom, 2, 16, 5));
  CheckCase(Abc(AbcControl::kCluster, 2, 16, 5));
}

ScanCase Linear(const std::string& name, std::unique_ptr<FeatureMap> phi, bool gated, int heads,
                int dh) {
  auto state = std::make_shared<LinearState>(heads, dh, std::move(phi), gated, 1e-6f);
  const int64_t d = int64_t{heads} * dh;
  return {name, state, PlainLayout(d, state->ExtraColumns()), d,
          [](std::mt19937& rng) { return Normal(rng, 2.0f); }};
}

TEST(ScanHead, LinearEqualsRowByRow) {
  constexpr int kHeads = 2, kDim = 12;
  std::mt19937 rng(7);
  for (bool gated : {false, true}) {
    for (RfaKernel kernel : {RfaKernel::kGaussian, RfaKernel::kArccos}) {
      CheckCase(Linear("rfa",
                       std::make_unique<RandomFeatureMap>(kHeads, kDim, 10, kernel,
                                                          RandomVector(kHeads * 10 * kDim, 1, rng)),
                       gated, kHeads, kDim));
    }
  }
  CheckCase(Linear(
      "t2r",
      std::make_unique<LearnedReluFeatureMap>(kDim, 9, RandomVector(kHeads * 9 * kDim, 1, rng),
                                              RandomVector(kHeads * 9, 1, rng)),
      false, kHeads, kDim));
  CheckCase(Linear("elu", std::make_unique<EluFeatureMap>(kDim), false, kHeads, kDim));
}

// The prepared rows of gated linear and gsa: q [H K] | k [Hkv K] | v [Hkv V] | gates.
KernelRowLayout MixerLayout(int heads, int kv_heads, int key_dim, int value_dim, int gates) {
  const int64_t q = int64_t{heads} * key_dim, k = int64_t{kv_heads} * key_dim;
  const int64_t v = int64_t{kv_heads} * value_dim;
  return {q, q + k, q + k + v, q + k + v + int64_t{kv_heads} * gates};
}

TEST(ScanHead, GatedLinearEqualsRowByRow) {
  for (AttentionType type : {AttentionType::kGla, AttentionType::kRetnet, AttentionType::kHgrn2}) {
    for (int kv_heads : {4, 2}) {  // GQA-shaped: two query heads per key/value head
      if (type == AttentionType::kHgrn2 && kv_heads != 4) continue;  // hgrn2: kv_heads == heads
      GatedLinearState::Options o;
      o.type = type;
      o.heads = 4;
      o.kv_heads = kv_heads;
      o.key_dim = 12;
      o.value_dim = 10;
      auto state = std::make_shared<GatedLinearState>(o);
      CheckCase({std::string(AttentionTypeName(type)) + " kv_heads " + std::to_string(kv_heads),
                 state, MixerLayout(4, kv_heads, 12, 10, 12), 4 * 10,
                 [](std::mt19937& rng) { return Uniform(rng, 0.5f, 1.0f); }});
    }
  }
}

TEST(ScanHead, GsaEqualsRowByRow) {
  for (int kv_heads : {4, 2}) {
    for (int slots : {6, 70}) {
      auto state =
          std::make_shared<GsaState>(4, kv_heads, 12, 10, slots, 8.0f, MixerFeatureMap::kNone,
                                     std::vector<float>{}, std::vector<float>(40, 1.0f), 1e-6f);
      CheckCase({"gsa kv_heads " + std::to_string(kv_heads) + " slots " + std::to_string(slots),
                 state, MixerLayout(4, kv_heads, 12, 10, slots), 4 * 10,
                 [](std::mt19937& rng) { return Uniform(rng, 0.3f, 1.0f); }});
    }
  }
}

// At the chunk form's shapes (slots (K + V) >= kGsaChunkMinStateFloats, runs of 32 rows and
// more: gsa_chunk.h), with GQA: the override's chunk form against the row-by-row default.
TEST(ScanHead, GsaChunkFormEqualsRowByRow) {
  auto state =
      std::make_shared<GsaState>(2, 1, 256, 256, 64, 8.0f, MixerFeatureMap::kNone,
                                 std::vector<float>{}, std::vector<float>(512, 1.0f), 1e-6f);
  ASSERT_GE(64 * (256 + 256), kGsaChunkMinStateFloats);
  CheckCase({"gsa chunk form", state, MixerLayout(2, 1, 256, 256, 64), 2 * 256,
             [](std::mt19937& rng) { return Uniform(rng, 0.8f, 1.0f); }});
}

// Sliding windows read prompt runs in blocks (SoftmaxReadWindowRun over the ring's rows in view
// and the run's own): windows shorter and longer than a run, one row, wider than a key block
// (128 rows), a ring that wraps inside the run; grouped-query heads as Hugging Face windows have.
TEST(ScanHead, WindowEqualsRowByRow) {
  for (int window : {1, 5, 16, 100, 200}) {
    auto state = std::make_shared<WindowState>(4, 12, window);
    CheckCase({"window " + std::to_string(window), state, PlainLayout(4 * 12, 0), 4 * 12,
               [](std::mt19937& rng) { return Normal(rng, 1.0f); }});
  }
  for (int window : {3, 70}) {
    auto state = std::make_shared<WindowState>(4, 2, 16, window, std::vector<float>{});
    CheckCase({"window GQA " + std::to_string(window), state, MixerLayout(4, 2, 16, 16, 0), 4 * 16,
               [](std::mt19937& rng) { return Normal(rng, 1.0f); }});
  }
}

// This thread's CPU time (a loaded machine's waits do not count).
double ThreadNanos() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e9 * static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec);
}

// Timing, not a check (run with --gtest_also_run_disabled_tests --gtest_filter='*Timing*'): one
// 512-row run over every head of the bench models' shapes (d 256, 4 heads), the row-by-row
// default against the override, best of 20 in thread CPU time, in ns per head-token.
TEST(ScanHead, DISABLED_Timing) {
  std::mt19937 rng(3);
  std::vector<ScanCase> cases;
  cases.push_back(Abc(AbcControl::kExp, 4, 64, 32));
  cases.push_back(Linear("rfa gated",
                         std::make_unique<RandomFeatureMap>(4, 64, 32, RfaKernel::kGaussian,
                                                            RandomVector(4 * 32 * 64, 1, rng)),
                         true, 4, 64));
  cases.push_back(
      Linear("t2r",
             std::make_unique<LearnedReluFeatureMap>(64, 32, RandomVector(4 * 32 * 64, 1, rng),
                                                     RandomVector(4 * 32, 1, rng)),
             false, 4, 64));
  cases.push_back(Linear("elu", std::make_unique<EluFeatureMap>(64), false, 4, 64));
  GatedLinearState::Options o;
  o.heads = o.kv_heads = 4;
  o.key_dim = o.value_dim = 64;
  cases.push_back({"gla", std::make_shared<GatedLinearState>(o), MixerLayout(4, 4, 64, 64, 64), 256,
                   [](std::mt19937& g) { return Uniform(g, 0.5f, 1.0f); }});
  cases.push_back(
      {"gsa 64 slots",
       std::make_shared<GsaState>(4, 4, 64, 64, 64, 8.0f, MixerFeatureMap::kNone,
                                  std::vector<float>{}, std::vector<float>(256, 1.0f), 1e-6f),
       MixerLayout(4, 4, 64, 64, 64), 256, [](std::mt19937& g) { return Uniform(g, 0.3f, 1.0f); }});
  constexpr int64_t kRows = 512;
  for (const ScanCase& c : cases) {
    const std::vector<float> rows = RandomRows(c, kRows, rng);
    double best[2] = {1e30, 1e30};
    for (int rep = 0; rep < 20; ++rep) {
      for (int by_default = 0; by_default < 2; ++by_default) {
        std::vector<float> fixed(static_cast<size_t>(c.state->FixedFloats()));
        c.state->Init(fixed.data());
        const double start = ThreadNanos();
        RunScan(c, rows, 0, kRows, 0, by_default == 1, fixed);
        best[by_default] = std::min(best[by_default], ThreadNanos() - start);
      }
    }
    const double per = static_cast<double>(kRows * c.state->heads());
    std::printf("%-14s row by row %7.0f ns/head-token, run %7.0f (%.2fx)\n", c.name.c_str(),
                best[1] / per, best[0] / per, best[1] / best[0]);
  }
}

}  // namespace
}  // namespace abcd
