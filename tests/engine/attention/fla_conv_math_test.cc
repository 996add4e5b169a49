// fla_math.h's short convolution and gated_deltanet math (what short_conv_cuda.cu and
// gated_delta_cuda.cu run per thread) against the CPU states, on the host: the convolved rows
// through the inner layer's prepare equal ShortConvState::PrepareRows (windows and runs of
// several rows), the window after every row of a run equals the CPU's, bit for bit, and the
// whole gated_deltanet layer as the kernels compute it (per-column prepare elements, then the
// q/k heads' L2 norms from their sums; the delta rule with the key rows split over 4 warps' partial
// sums; o_norm and the gate) equals GatedDeltaState's PrepareRows, UpdateHead / ReadHead and
// FinishRows, with and without a convolution, GVA, gates and negative eigenvalues.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/attention/fla_math.h"
#include "engine/ops/cpu_context.h"
#include "tests/engine/attention/fla_conv_cases.h"

namespace abcd::testing_fla {
namespace {

constexpr int kWarps = 4;  // gated_delta_cuda.cu's warps per block

void ExpectNear(float actual, float expected, float tolerance, const std::string& what) {
  EXPECT_LE(std::fabs(actual - expected), tolerance * std::max(1.0f, std::fabs(expected)))
      << what << ": " << actual << " vs " << expected;
}

// gated_deltanet's prepared rows as GatedDeltaPrepareKernel forms them.
std::vector<float> DeltaPrepare(const fla::DeltaParams& p, const float* projection, int64_t stride,
                                int64_t rows) {
  const int64_t width = p.PreparedWidth();
  std::vector<float> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out.data() + r * width;
    for (int64_t c = 0; c < width; ++c)
      row[c] = fla::DeltaPrepareElement(p, projection + r * stride, c);
    for (int head = 0; head < 2 * p.kv_heads; ++head) {
      float* x = row + int64_t{head} * p.key_dim;
      float squares = 0.0f;
      for (int c = 0; c < p.key_dim; ++c) squares += x[c] * x[c];
      const float scale = fla::L2Scale(squares);
      for (int c = 0; c < p.key_dim; ++c) x[c] = fla::DeltaNormed(p, x[c], scale, head);
    }
  }
  return out;
}

// GatedDeltaStepKernel then GatedDeltaFinishKernel over one sequence's rows (state S, H K V).
void DeltaStepAndFinish(const fla::DeltaParams& p, const float* prepared, int64_t rows, float* S,
                        float* out) {
  const int K = p.key_dim, V = p.value_dim, H = p.heads;
  const int64_t width = p.PreparedWidth(), out_width = p.AttendedWidth();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = prepared + r * width;
    float* y = out + r * out_width;
    for (int h = 0; h < H; ++h) {
      const int qk = h / (H / p.kv_heads);
      const float* q = row + int64_t{qk} * K;
      const float* k = row + p.QkWidth() + int64_t{qk} * K;
      const float decay = row[p.ExtraOffset() + h], beta = row[p.ExtraOffset() + H + h];
      float* s = S + int64_t{h} * K * V;
      for (int j = 0; j < V; ++j) {
        float partial[kWarps] = {}, read[kWarps] = {};
        for (int c = 0; c < K; ++c) partial[c % kWarps] += k[c] * s[int64_t{c} * V + j];
        float delta = 0.0f;
        for (float x : partial) delta += x;
        const float update = beta * (row[p.VOffset() + int64_t{h} * V + j] - decay * delta);
        for (int c = 0; c < K; ++c) {
          float& e = s[int64_t{c} * V + j];
          e = decay * e + k[c] * update;
          read[c % kWarps] += q[c] * e;
        }
        float sum = 0.0f;
        for (float x : read) sum += x;
        y[int64_t{h} * V + j] = sum;
      }
    }
    for (int h = 0; h < H; ++h) {
      float* x = y + int64_t{h} * V;
      float squares = 0.0f;
      for (int j = 0; j < V; ++j) squares += x[j] * x[j];
      const float inverse_rms = fla::DeltaInverseRms(p, squares);
      for (int j = 0; j < V; ++j) {
        x[j] = fla::DeltaFinishElement(p, x[j], inverse_rms, int64_t{h} * V + j, row);
      }
    }
  }
}

// The CPU layer over one sequence's `rows` projection rows: PrepareRows, UpdateHead / ReadHead of
// every head row by row, FinishRows. Returns the attended rows; `prepared_out` the prepared rows.
std::vector<float> CpuLayer(const AttentionState& state, const float* projection, int64_t width,
                            int64_t rows, float* fixed, std::vector<float>* prepared_out) {
  CpuContext ctx(1);
  std::vector<StateRef> refs(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) refs[static_cast<size_t>(r)] = {fixed, nullptr, r};
  const int64_t prepared_width = state.PreparedWidth();
  const KernelRowLayout layout = state.PreparedLayout();
  std::vector<float> prepared(static_cast<size_t>(rows * prepared_width));
  state.PrepareRows(ctx, projection, width, rows, refs, prepared.data());
  const int64_t out_width = state.AttendedWidth(0);
  std::vector<float> out(static_cast<size_t>(rows * out_width), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = prepared.data() + r * prepared_width;
    const KeyValueRow kv{row + layout.k, row + layout.v, row + layout.extra};
    for (int h = 0; h < state.heads(); ++h) {
      state.UpdateHead(h, kv, refs[static_cast<size_t>(r)]);
      state.ReadHead(h, row, refs[static_cast<size_t>(r)], out.data() + r * out_width);
    }
  }
  state.FinishRows(ctx, prepared.data(), rows, out.data());
  if (prepared_out != nullptr) *prepared_out = std::move(prepared);
  return out;
}

// A state block: a random window (with a convolution), and for `filled` random inner floats too
// (a later pass); else the inner state empty.
std::vector<float> RandomBlock(const ConvCase& c, bool filled, uint32_t seed) {
  std::vector<float> block(static_cast<size_t>(c.state->FixedFloats()));
  c.state->Init(block.data());
  std::mt19937 rng(seed);
  const int64_t size = static_cast<int64_t>(block.size());
  const int64_t inner = c.spec.conv_size > 0 ? c.host.inner_floats : size;
  if (filled) {
    const std::vector<float> state = Uniform(inner, rng, -0.2f, 0.2f);
    std::copy(state.begin(), state.end(), block.begin());
  }
  const std::vector<float> window = Uniform(size - inner, rng, -2.0f, 2.0f);
  std::copy(window.begin(), window.end(), block.begin() + inner);
  return block;
}

// The convolved rows as ShortConvRowsKernel writes them (a run of `rows` rows of one sequence).
std::vector<float> Convolve(const ConvCase& c, const std::vector<float>& projection, int64_t rows,
                            const float* window) {
  const int64_t width = c.projection_width;
  std::vector<float> out(projection);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t ch = 0; ch < c.host.channels; ++ch) {
      out[static_cast<size_t>(r * width + ch)] =
          fla::ShortConvElement(c.host, projection.data() + r * width, width, r, window, ch);
    }
  }
  return out;
}

TEST(FlaConvMath, ConvolvedRowsThroughTheInnerPrepareEqualPrepareRows) {
  constexpr int64_t kRows = 5;  // more than any case's taps: rows read rows and the window
  for (const auto& c : AllConvCases()) {
    if (c->spec.conv_size == 0) continue;
    SCOPED_TRACE(c->name);
    const int64_t width = c->projection_width;
    std::mt19937 rng(3);
    const std::vector<float> projection = Uniform(kRows * width, rng, -2.0f, 2.0f);
    std::vector<float> block = RandomBlock(*c, false, 4);
    const std::vector<float> convolved =
        Convolve(*c, projection, kRows, block.data() + c->host.inner_floats);
    std::vector<float> expected;
    CpuLayer(*c->state, projection.data(), width, kRows, block.data(), &expected);
    const int64_t cpu_width = c->state->PreparedWidth();
    std::vector<float> got;
    if (c->delta_case != nullptr) {
      got = DeltaPrepare(c->delta_case->host, convolved.data(), width, kRows);
    } else {
      const fla::Params& p = c->fla_case->host;
      got.resize(static_cast<size_t>(kRows * p.PreparedWidth()));
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t col = 0; col < p.PreparedWidth(); ++col) {
          got[static_cast<size_t>(r * p.PreparedWidth() + col)] =
              fla::PrepareElement(p, convolved.data() + r * width, r, col);
        }
      }
    }
    const int64_t inner_width = static_cast<int64_t>(got.size()) / kRows;
    ASSERT_EQ(inner_width + c->host.channels, cpu_width);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t col = 0; col < inner_width; ++col) {
        ExpectNear(got[static_cast<size_t>(r * inner_width + col)],
                   expected[static_cast<size_t>(r * cpu_width + col)], 2e-6f,
                   "row " + std::to_string(r) + " column " + std::to_string(col));
      }
    }
  }
}

TEST(FlaConvMath, WindowAfterEachRowEqualsTheCpuWindow) {
  constexpr int64_t kRows = 6;
  for (const auto& c : AllConvCases()) {
    if (c->spec.conv_size == 0) continue;
    SCOPED_TRACE(c->name);
    const int64_t width = c->projection_width, C = c->host.channels;
    const int64_t kept = c->host.size - 1, inner = c->host.inner_floats;
    std::mt19937 rng(8);
    const std::vector<float> projection = Uniform(kRows * width, rng, -2.0f, 2.0f);
    std::vector<float> block = RandomBlock(*c, false, 9);
    const std::vector<float> before(block.begin() + inner, block.end());
    for (int64_t r = 0; r < kRows; ++r) {
      // The CPU folds row r (its prepare reads the window as it is before the row).
      CpuLayer(*c->state, projection.data() + r * width, width, 1, block.data(), nullptr);
      for (int64_t t = 0; t < kept; ++t) {
        for (int64_t ch = 0; ch < C; ++ch) {
          ASSERT_EQ(fla::ShortConvWindowAfter(c->host, projection.data(), width, r + 1,
                                              before.data(), t, ch),
                    block[static_cast<size_t>(inner + t * C + ch)])
              << "after row " << r << ", entry " << t << ", channel " << ch;
        }
      }
    }
  }
}

TEST(FlaConvMath, GatedDeltaLayerAsTheKernelsComputeItEqualsTheCpu) {
  constexpr int64_t kRows = 7;
  for (const auto& c : AllConvCases()) {
    if (c->delta_case == nullptr) continue;
    SCOPED_TRACE(c->name);
    const fla::DeltaParams& p = c->delta_case->host;
    const bool conv = c->spec.conv_size > 0;
    const int64_t width = c->projection_width;
    std::mt19937 rng(12);
    const std::vector<float> projection = Uniform(kRows * width, rng, -2.0f, 2.0f);
    for (bool filled : {false, true}) {
      std::vector<float> block = RandomBlock(*c, filled, 13);
      std::vector<float> device_block = block;
      const std::vector<float> expected =
          CpuLayer(*c->state, projection.data(), width, kRows, block.data(), nullptr);
      const float* window = conv ? device_block.data() + c->host.inner_floats : nullptr;
      const std::vector<float> input = conv ? Convolve(*c, projection, kRows, window) : projection;
      const std::vector<float> prepared = DeltaPrepare(p, input.data(), width, kRows);
      std::vector<float> got(static_cast<size_t>(kRows * p.AttendedWidth()));
      DeltaStepAndFinish(p, prepared.data(), kRows, device_block.data(), got.data());
      if (conv) {  // ShortConvAdvanceKernel, in place
        const int64_t C = c->host.channels;
        float* w = device_block.data() + c->host.inner_floats;
        for (int64_t ch = 0; ch < C; ++ch) {
          for (int64_t t = 0; t + 1 < c->host.size; ++t) {
            w[t * C + ch] =
                fla::ShortConvWindowAfter(c->host, projection.data(), width, kRows, w, t, ch);
          }
        }
      }
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ExpectNear(got[i], expected[i], 2e-5f, "attended " + std::to_string(i));
      }
      for (size_t i = 0; i < block.size(); ++i) {
        ExpectNear(device_block[i], block[i], 2e-5f, "state float " + std::to_string(i));
      }
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace abcd::testing_fla
