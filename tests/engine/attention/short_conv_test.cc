// ShortConvState (engine/attention/short_conv.h) around the fla states, and GatedDeltaState: the
// convolution by hand (hgrn2's value columns are its convolved i projection, with and without
// silu and bias), the window holding the last conv_size - 1 inputs exactly, rows fed in one call
// equal to the same rows split over calls (the window carries the taps: bitwise), and the
// whole-run Scan equal to row-by-row UpdateHead / ReadHead (GatedDeltaState's fused ScanHead).
#include "engine/attention/short_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "engine/attention/gated_delta_state.h"
#include "engine/attention/gated_linear_state.h"
#include "engine/ops/cpu_context.h"

namespace abcd {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = normal(rng);
  return out;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// One call of a sequence's `rows` projection rows (`width` floats each) at positions from
// `start`: PrepareRows, then Scan (`scan`) or per row UpdateHead and ReadHead of every head,
// then FinishRows. Returns the attended rows; `prepared_out` receives the prepared rows.
std::vector<float> Feed(CpuContext& ctx, const AttentionState& state, const float* projection,
                        int64_t width, int64_t rows, int64_t start, float* fixed, bool scan = false,
                        std::vector<float>* prepared_out = nullptr) {
  std::vector<StateRef> states(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) states[static_cast<size_t>(r)] = {fixed, nullptr, start + r};
  const int64_t prepared_width = state.PreparedWidth();
  const KernelRowLayout layout = state.PreparedLayout();
  std::vector<float> prepared(static_cast<size_t>(rows * prepared_width));
  state.PrepareRows(ctx, projection, width, rows, states, prepared.data());
  const int64_t out_width = state.AttendedWidth(0);
  std::vector<float> out(static_cast<size_t>(rows * out_width));
  if (scan) {
    const RowRun run{0, rows};
    ScanArgs args;
    args.rows = prepared.data();
    args.width = prepared_width;
    args.layout = layout;
    args.states = states;
    args.runs = std::span<const RowRun>(&run, 1);
    args.out = out.data();
    args.out_width = out_width;
    state.Scan(ctx, args);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = prepared.data() + r * prepared_width;
      const KeyValueRow kv{row + layout.k, row + layout.v, row + layout.extra};
      for (int h = 0; h < state.heads(); ++h) {
        state.UpdateHead(h, kv, states[static_cast<size_t>(r)]);
        state.ReadHead(h, row, states[static_cast<size_t>(r)], out.data() + r * out_width);
      }
    }
  }
  state.FinishRows(ctx, prepared.data(), rows, out.data());
  if (prepared_out != nullptr) *prepared_out = std::move(prepared);
  return out;
}

// hgrn2, 2 heads of K = V = 4: projection rows q [8] | f [8] | i [8], all convolved.
std::unique_ptr<AttentionState> Hgrn2() {
  GatedLinearState::Options o;
  o.type = AttentionType::kHgrn2;
  o.heads = o.kv_heads = 2;
  o.key_dim = o.value_dim = 4;
  o.scale_query = true;
  o.norm_weight.assign(8, 1.0f);
  return std::make_unique<GatedLinearState>(std::move(o));
}

// Gated DeltaNet: 4 value heads of V = 6 over 2 q/k heads of K = 8, output gate: projection rows
// q [16] | k [16] | v [24] | g [24] | a [4] | b [4]; q|k|v (56 channels) convolved.
constexpr int64_t kDeltaWidth = 88, kDeltaChannels = 56;
std::unique_ptr<AttentionState> Delta(bool silu_qkv, std::mt19937& rng) {
  GatedDeltaState::Options o;
  o.heads = 4;
  o.kv_heads = 2;
  o.key_dim = 8;
  o.value_dim = 6;
  o.output_gate = true;
  o.silu_qkv = silu_qkv;
  o.a_log = Random(4, rng, 0.5f);
  o.dt_bias = Random(4, rng, 0.5f);
  o.norm_weight = Random(6, rng, 0.3f);
  for (float& w : o.norm_weight) w += 1.0f;
  return std::make_unique<GatedDeltaState>(std::move(o));
}

std::unique_ptr<ShortConvState> WithConv(std::unique_ptr<AttentionState> inner, int channels,
                                         int size, bool bias, bool silu, std::mt19937& rng) {
  ShortConvState::Options o;
  o.channels = channels;
  o.size = size;
  o.weight = Random(static_cast<size_t>(channels) * size, rng, 0.5f);
  if (bias) o.bias = Random(static_cast<size_t>(channels), rng, 0.2f);
  o.silu = silu;
  return std::make_unique<ShortConvState>(std::move(inner), std::move(o));
}

TEST(ShortConv, ConvolvesTheLastInputsAndKeepsThemInTheState) {
  CpuContext ctx(2);
  for (const bool silu : {false, true}) {
    for (const bool bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "silu " << silu << " bias " << bias);
      std::mt19937 rng(7);
      constexpr int kTaps = 3, kChannels = 24, kRows = 5;
      const auto state = WithConv(Hgrn2(), kChannels, kTaps, bias, silu, rng);
      const int64_t inner_floats = state->inner().FixedFloats();
      ASSERT_EQ(state->FixedFloats(), inner_floats + (kTaps - 1) * kChannels);
      std::vector<float> fixed(static_cast<size_t>(state->FixedFloats()), 5.0f);
      state->Init(fixed.data());
      const std::vector<float> projection = Random(kRows * kChannels, rng);
      std::vector<float> prepared;
      Feed(ctx, *state, projection.data(), kChannels, kRows, 0, fixed.data(), false, &prepared);
      const ShortConvState::Options& o = state->options();
      const KernelRowLayout layout = state->PreparedLayout();
      for (int r = 0; r < kRows; ++r) {
        for (int c = 16; c < 24; ++c) {  // hgrn2's i columns are its values, as convolved
          float y = bias ? o.bias[static_cast<size_t>(c)] : 0.0f;
          for (int i = 0; i < kTaps; ++i) {
            const int t = r - (kTaps - 1) + i;  // before the first row: zero
            if (t >= 0) {
              y += o.weight[static_cast<size_t>(c * kTaps + i)] *
                   projection[static_cast<size_t>(t * kChannels + c)];
            }
          }
          if (silu) y = y / (1.0f + std::exp(-y));
          EXPECT_NEAR(prepared[static_cast<size_t>(r * layout.width + layout.v + c - 16)], y, 1e-5f)
              << "row " << r << " channel " << c;
        }
      }
      // The window: rows 3 and 4's inputs, oldest first, exactly.
      for (int t = 0; t < kTaps - 1; ++t) {
        for (int c = 0; c < kChannels; ++c) {
          EXPECT_EQ(fixed[static_cast<size_t>(inner_floats + t * kChannels + c)],
                    projection[static_cast<size_t>((kRows - 2 + t) * kChannels + c)]);
        }
      }
    }
  }
}

TEST(ShortConv, RowsInOneCallEqualTheSameRowsOverSeveralCalls) {
  CpuContext ctx(2);
  std::mt19937 rng(11);
  const auto state = WithConv(Delta(false, rng), kDeltaChannels, 4, true, true, rng);
  constexpr int64_t kRows = 7;
  const std::vector<float> projection = Random(kRows * kDeltaWidth, rng);
  std::vector<float> whole(static_cast<size_t>(state->FixedFloats()));
  state->Init(whole.data());
  const std::vector<float> expected =
      Feed(ctx, *state, projection.data(), kDeltaWidth, kRows, 0, whole.data());
  // Splits: one row per call, and 2 + 1 + 4 rows (taps from the window and from the call).
  for (const std::vector<int64_t>& split :
       {std::vector<int64_t>(kRows, 1), std::vector<int64_t>{2, 1, 4}}) {
    std::vector<float> fixed(static_cast<size_t>(state->FixedFloats()));
    state->Init(fixed.data());
    std::vector<float> out;
    int64_t first = 0;
    for (int64_t count : split) {
      const std::vector<float> part = Feed(ctx, *state, projection.data() + first * kDeltaWidth,
                                           kDeltaWidth, count, first, fixed.data());
      out.insert(out.end(), part.begin(), part.end());
      first += count;
    }
    EXPECT_EQ(out, expected);
    EXPECT_EQ(fixed, whole);
  }
}

TEST(ShortConv, ScanEqualsRowByRow) {
  CpuContext ctx(2);
  std::mt19937 rng(13);
  std::vector<std::unique_ptr<AttentionState>> states;
  states.push_back(Delta(true, rng));  // the bare delta rule (fused ScanHead)
  states.push_back(WithConv(Delta(false, rng), kDeltaChannels, 4, false, true, rng));
  states.push_back(WithConv(Hgrn2(), 24, 2, true, false, rng));
  for (size_t i = 0; i < states.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "state " << i);
    const AttentionState& state = *states[i];
    const int64_t width = i == 2 ? 24 : kDeltaWidth;
    constexpr int64_t kRows = 9;
    const std::vector<float> projection = Random(kRows * width, rng);
    std::vector<float> a(static_cast<size_t>(state.FixedFloats())), b(a.size());
    state.Init(a.data());
    state.Init(b.data());
    // Two calls each, so the second starts from a state holding rows.
    for (const int64_t first : {int64_t{0}, int64_t{4}}) {
      const int64_t count = first == 0 ? 4 : kRows - 4;
      const float* rows = projection.data() + first * width;
      const std::vector<float> scanned =
          Feed(ctx, state, rows, width, count, first, a.data(), true);
      const std::vector<float> by_row = Feed(ctx, state, rows, width, count, first, b.data());
      EXPECT_LE(MaxDiff(scanned, by_row), 1e-5f);
      EXPECT_LE(MaxDiff(a, b), 1e-5f);
    }
  }
}

}  // namespace
}  // namespace abcd
