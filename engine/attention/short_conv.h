// fla's ShortConvolution (use_short_conv) in front of an fla mixer's state: a depthwise causal
// convolution of W = conv_size taps over the first C columns of each projection row (the q|k|v
// projections; hgrn2's q|f|i), per channel c
//   y_c(t) = b_c + sum_{i=0}^{W-1} w[c, i] x_c(t - (W - 1) + i),   then silu (gsa, gla,
//   gated_deltanet) or nothing (hgrn2),
// with zeros before the sequence's first token; the inner state then prepares the convolved rows
// as it would the projection's. The last W - 1 inputs of every channel are part of the sequence's
// fixed state (after the inner state's floats, [W - 1, C] oldest first), so fork, snapshot,
// sessions, the prefix cache, speculative checkpoints and admission bytes carry them exactly.
//
// How the window stays exact under speculative checkpoints: PrepareRows reads the window only
// (a row's taps come from the rows before it in its run and from the window), and appends each
// row's raw inputs to its prepared row; the window advances row by row in UpdateHead / ScanHead,
// head h shifting its own channel range [h C / H, (h + 1) C / H), so once every head has folded a
// row the window is the one after that row. Immutable; thread-safe per state.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "engine/attention/attention_state.h"

namespace abcd {

class ShortConvState final : public AttentionState {
 public:
  struct Options {
    int channels = 0;  // C: convolved columns at the start of a projection row
    int size = 0;      // W: taps (conv_size)
    std::vector<float>
        weight;               // [C, W] (fla's [C, 1, W]); w[c, W - 1] multiplies the current input
    std::vector<float> bias;  // [C], or empty (no bias)
    bool silu = true;         // activation after the convolution
  };
  // `inner` must prepare its rows (PreparedWidth() > 0).
  ShortConvState(std::unique_ptr<AttentionState> inner, Options options);

  const AttentionState& inner() const { return *inner_; }
  const Options& options() const { return o_; }

  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return inner_->heads(); }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  // The inner state's prepared row followed by the row's C raw (unconvolved) inputs.
  int64_t PreparedWidth() const override { return inner_width_ + o_.channels; }
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t d_model) const override { return inner_->AttendedWidth(d_model); }
  void FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                  float* attended) const override;

 private:
  // Head `head`'s channels of the window in `fixed` move one row on, `raw` entering last.
  void Shift(int head, const float* raw, float* fixed) const;

  std::unique_ptr<AttentionState> inner_;
  Options o_;
  std::vector<float> by_tap_;  // the weights as [W, C]
  int64_t inner_floats_ = 0;   // the inner state's fixed floats (the window follows)
  int64_t inner_width_ = 0;    // the inner state's prepared row width
  KernelRowLayout layout_;     // the inner state's prepared layout
};

}  // namespace abcd
