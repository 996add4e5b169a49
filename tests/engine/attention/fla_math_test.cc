// fla_math.h (the per-element math the CUDA fla kernels run) against the CPU states it mirrors:
// every prepared column equals GatedLinearState / GsaState::PrepareRows and every attended
// column FinishRows, for every case of fla_cases.h, on the host. The layouts (prepared and
// projection widths) agree with the CPU states'.
#include "engine/attention/fla_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/engine/attention/fla_cases.h"

namespace abcd::testing_fla {
namespace {

// The CPU's silu uses a polynomial exp (vector_math_cpu.cc) and fla_math.h libm's: a few ulps.
constexpr float kTolerance = 2e-6f;

void ExpectNear(float actual, float expected, const std::string& what) {
  EXPECT_LE(std::fabs(actual - expected), kTolerance * std::max(1.0f, std::fabs(expected)))
      << what << ": " << actual << " vs " << expected;
}

TEST(FlaMath, LayoutsMatchTheCpuStates) {
  for (const auto& c : AllCases()) {
    SCOPED_TRACE(c->name);
    const KernelRowLayout layout = c->state->PreparedLayout();
    EXPECT_EQ(c->host.PreparedWidth(), c->state->PreparedWidth());
    EXPECT_EQ(c->host.KOffset(), layout.k);
    EXPECT_EQ(c->host.VOffset(), layout.v);
    EXPECT_EQ(c->host.ExtraOffset(), layout.extra);
    EXPECT_EQ(c->host.AttendedWidth(), c->state->AttendedWidth(0));
  }
}

TEST(FlaMath, PrepareElementEqualsPrepareRows) {
  constexpr int64_t kRows = 6;
  for (const auto& c : AllCases()) {
    SCOPED_TRACE(c->name);
    const int64_t projection_width = c->host.ProjectionWidth();
    const int64_t width = c->host.PreparedWidth();
    const std::vector<float> projection = RandomProjection(*c, kRows, 11);
    std::vector<StateRef> states(kRows);
    const int64_t positions[kRows] = {0, 1, 7, 130, 4095, 70000};
    for (int64_t r = 0; r < kRows; ++r) states[static_cast<size_t>(r)].position = positions[r];
    std::vector<float> expected(static_cast<size_t>(kRows * width), 0.0f);
    CpuContext ctx(1);
    c->state->PrepareRows(ctx, projection.data(), projection_width, kRows, states, expected.data());
    const bool retnet = c->host.kind == fla::Kind::kRetnet;
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t col = 0; col < width; ++col) {
        // retnet's lambda columns are unused (its decay is per head); the CPU leaves them alone.
        if (retnet && col >= c->host.ExtraOffset() && col < c->host.GateOffset()) continue;
        ExpectNear(fla::PrepareElement(c->host, projection.data() + r * projection_width,
                                       positions[r], col),
                   expected[static_cast<size_t>(r * width + col)],
                   "row " + std::to_string(r) + " column " + std::to_string(col));
      }
    }
  }
}

TEST(FlaMath, FinishElementEqualsFinishRows) {
  constexpr int64_t kRows = 3;
  for (const auto& c : AllCases()) {
    SCOPED_TRACE(c->name);
    const int64_t width = c->host.AttendedWidth(), prepared_width = c->host.PreparedWidth();
    std::mt19937 rng(5);
    const std::vector<float> prepared = Uniform(kRows * prepared_width, rng, -3.0f, 3.0f);
    const std::vector<float> reads = Uniform(kRows * width, rng, -2.0f, 2.0f);
    std::vector<float> expected = reads;
    CpuContext ctx(1);
    c->state->FinishRows(ctx, prepared.data(), kRows, expected.data());
    const int64_t group = c->host.NormGroup();
    ASSERT_EQ(width % group, 0);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t begin = 0; begin < width; begin += group) {
        double squares = 0.0;
        std::vector<float> x(static_cast<size_t>(group));
        for (int64_t i = 0; i < group; ++i) {
          x[static_cast<size_t>(i)] =
              fla::FinishInput(c->host, reads[static_cast<size_t>(r * width + begin + i)]);
          squares += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
        }
        const float inverse_rms = fla::InverseRms(c->host, squares);
        for (int64_t i = 0; i < group; ++i) {
          ExpectNear(fla::FinishElement(c->host, x[static_cast<size_t>(i)], inverse_rms, begin + i,
                                        prepared.data() + r * prepared_width),
                     expected[static_cast<size_t>(r * width + begin + i)],
                     "row " + std::to_string(r) + " column " + std::to_string(begin + i));
        }
      }
    }
  }
}

}  // namespace
}  // namespace abcd::testing_fla
