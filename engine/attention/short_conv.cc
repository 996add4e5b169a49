#include "engine/attention/short_conv.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "engine/ops/elementwise.h"

namespace abcd {

ShortConvState::ShortConvState(std::unique_ptr<AttentionState> inner, Options options)
    : inner_(std::move(inner)), o_(std::move(options)) {
  inner_floats_ = inner_->FixedFloats();
  inner_width_ = inner_->PreparedWidth();
  layout_ = inner_->PreparedLayout();
  // Taps-major [W, C] for the row loops below.
  by_tap_.resize(o_.weight.size());
  for (int c = 0; c < o_.channels; ++c) {
    for (int i = 0; i < o_.size; ++i) {
      by_tap_[static_cast<size_t>(i) * o_.channels + c] =
          o_.weight[static_cast<size_t>(c) * o_.size + i];
    }
  }
}

int64_t ShortConvState::FixedFloats() const {
  return inner_floats_ + int64_t{o_.size - 1} * o_.channels;
}

void ShortConvState::Init(float* fixed) const {
  inner_->Init(fixed);
  std::fill(fixed + inner_floats_, fixed + FixedFloats(), 0.0f);
}

KernelRowLayout ShortConvState::PreparedLayout() const {
  KernelRowLayout layout = layout_;
  layout.width = PreparedWidth();
  return layout;
}

void ShortConvState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                                 int64_t rows, std::span<const StateRef> states,
                                 float* prepared) const {
  const int64_t C = o_.channels, W = o_.size;
  // Each row's index in its run of consecutive rows of one sequence: taps before the run's first
  // row come from the sequence's window.
  absl::InlinedVector<int64_t, 64> in_run(static_cast<size_t>(rows));
  for (int64_t r = 1; r < rows; ++r) {
    const size_t i = static_cast<size_t>(r);
    in_run[i] = states[i].fixed == states[i - 1].fixed ? in_run[i - 1] + 1 : 0;
  }
  float* convolved = ctx.Buffer(Scratch::kMixerRows, rows * projection_width);
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    const float* x = projection + r * projection_width;
    float* y = convolved + r * projection_width;
    const float* window = states[static_cast<size_t>(r)].fixed + inner_floats_;  // [W - 1, C]
    const int64_t before = in_run[static_cast<size_t>(r)];
    if (o_.bias.empty()) {
      std::fill(y, y + C, 0.0f);
    } else {
      std::copy(o_.bias.begin(), o_.bias.end(), y);
    }
    for (int64_t i = 0; i < W; ++i) {
      const int64_t back = W - 1 - i;  // tokens before this row
      const float* in =
          back <= before ? x - back * projection_width : window + (W - 1 - (back - before)) * C;
      const float* w = by_tap_.data() + i * C;
      for (int64_t c = 0; c < C; ++c) y[c] += w[c] * in[c];
    }
    if (o_.silu) cpu::SiluInPlace(y, C);
    std::copy(x + C, x + projection_width, y + C);
  });
  inner_->PrepareRows(ctx, convolved, projection_width, rows, states, prepared);
  // The inner rows (inner_width_ apart) spread to PreparedWidth() apart, last row first (no
  // source is overwritten before it moves), each followed by its raw inputs.
  const int64_t width = PreparedWidth();
  for (int64_t r = rows - 1; r >= 0; --r) {
    float* row = prepared + r * width;
    std::memmove(row, prepared + r * inner_width_, static_cast<size_t>(inner_width_) * 4);
    std::copy(projection + r * projection_width, projection + r * projection_width + C,
              row + inner_width_);
  }
}

void ShortConvState::Shift(int head, const float* raw, float* fixed) const {
  const int64_t C = o_.channels, W = o_.size, H = heads();
  if (W < 2) return;
  const int64_t first = head * C / H, last = (head + 1) * C / H;
  float* window = fixed + inner_floats_;
  for (int64_t t = 0; t + 2 < W; ++t) {
    std::copy(window + (t + 1) * C + first, window + (t + 1) * C + last, window + t * C + first);
  }
  std::copy(raw + first, raw + last, window + (W - 2) * C + first);
}

void ShortConvState::UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const {
  inner_->UpdateHead(head, row, state);
  Shift(head, row.k - layout_.k + inner_width_, state.fixed);
}

void ShortConvState::ReadHead(int head, const float* q, const StateRef& state, float* out) const {
  inner_->ReadHead(head, q, state, out);
}

void ShortConvState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  inner_->ScanHead(head, args, run);
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    Shift(head, args.rows + r * args.width + inner_width_,
          args.states[static_cast<size_t>(r)].fixed);
  }
}

void ShortConvState::FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                                float* attended) const {
  // The inner state reads its rows inner_width_ apart.
  const int64_t width = PreparedWidth();
  float* compact = ctx.Buffer(Scratch::kMixerRows, rows * inner_width_);
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    std::copy_n(prepared + r * width, inner_width_, compact + r * inner_width_);
  });
  inner_->FinishRows(ctx, compact, rows, attended);
}

}  // namespace abcd
