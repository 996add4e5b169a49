#include "engine/attention/attention_state.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/attention/abc_state.h"
#include "engine/attention/linear_state.h"
#include "engine/attention/softmax_state.h"
#include "engine/attention/txl_state.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

namespace abcd {

void AttentionState::Scan(CpuContext& ctx, const ScanArgs& args) const {
  const int64_t n = heads();
  ctx.pool().ParallelFor(static_cast<int64_t>(args.runs.size()) * n, [&](int64_t task) {
    ScanHead(static_cast<int>(task % n), args, args.runs[static_cast<size_t>(task / n)]);
  });
}

void AttentionState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    const StateRef& state = args.states[static_cast<size_t>(r)];
    UpdateHead(head, args.KeyValueOf(r), state);
    ReadHead(head, args.rows + r * args.width, state, args.out + r * args.out_width);
  }
}

std::string LinformerTableName(absl::string_view prefix) {
  if (absl::StartsWith(prefix, "encoder.")) return "encoder.linformer.weight";
  if (absl::EndsWith(prefix, ".cross")) return "decoder.cross_linformer.weight";
  return "decoder.linformer.weight";
}

absl::StatusOr<std::unique_ptr<AttentionState>> MakeAttentionState(const ModelConfig& config,
                                                                   const AttentionSpec& spec,
                                                                   const std::string& prefix,
                                                                   WeightLoader& weights) {
  const int heads = config.n_heads;
  const int dh = config.head_dim();
  switch (spec.type) {
    case AttentionType::kSoftmax:
      return std::make_unique<SoftmaxState>(heads, dh);
    case AttentionType::kWindow:
      return std::make_unique<WindowState>(heads, dh, spec.window, spec.dilation);
    case AttentionType::kAbc: {
      std::vector<float> table;
      if (spec.control == AbcControl::kPosition) {
        // One table per stack: decoder self, encoder self, and the decoder's cross table for
        // cross attention (prefix "decoder.layers.i.cross"); each layer keeps its own copy.
        ABCD_ASSIGN_OR_RETURN(
            table, weights.Load(LinformerTableName(prefix), {spec.slots, spec.max_positions}));
      }
      return std::make_unique<AbcState>(heads, dh, spec.slots, spec.control, spec.reduce, spec.seed,
                                        spec.layer_id, spec.block, std::move(table),
                                        spec.max_positions);
    }
    case AttentionType::kRfa: {
      const int64_t features = spec.features;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> projection,
                            weights.Load(prefix + ".rfa.proj", {heads, features, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> sigma,
                            weights.Load(prefix + ".rfa.sigma", {heads, dh}));
      // w_i = sigma * w~_i, folded once.
      for (int h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < features; ++i) {
          float* row = projection.data() + (h * features + i) * dh;
          for (int c = 0; c < dh; ++c) row[c] *= sigma[h * dh + c];
        }
      }
      auto phi = std::make_unique<RandomFeatureMap>(heads, dh, spec.features, spec.kernel,
                                                    std::move(projection));
      return std::make_unique<LinearState>(heads, dh, std::move(phi), spec.gate, spec.eps);
    }
    case AttentionType::kT2r: {
      const int64_t r = spec.features;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> w,
                            weights.Load(prefix + ".t2r.weight", {heads, r, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> b, weights.Load(prefix + ".t2r.bias", {heads, r}));
      auto phi =
          std::make_unique<LearnedReluFeatureMap>(dh, spec.features, std::move(w), std::move(b));
      return std::make_unique<LinearState>(heads, dh, std::move(phi), false, spec.eps);
    }
    case AttentionType::kElu:
      return std::make_unique<LinearState>(heads, dh, std::make_unique<EluFeatureMap>(dh), false,
                                           spec.eps);
    case AttentionType::kTxl: {
      // txl is decoder self attention only: u and v are the decoder stack's, shared by its layers.
      const int64_t d = config.d_model;
      ABCD_ASSIGN_OR_RETURN(std::vector<float> w_r, weights.Load(prefix + ".r.weight", {d, d}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> u, weights.Load("decoder.r_w_bias", {heads, dh}));
      ABCD_ASSIGN_OR_RETURN(std::vector<float> v, weights.Load("decoder.r_r_bias", {heads, dh}));
      // q arrives scaled by 1/sqrt(dh); scaling u and v alike gives ((q + u).k + (q + v).p) /
      // sqrt(dh).
      const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
      for (float& x : u) x *= scale;
      for (float& x : v) x *= scale;
      const int64_t rows = int64_t{std::min(spec.memory, spec.clamp_len)} + 1;
      return std::make_unique<TxlState>(heads, dh, spec.memory, spec.clamp_len, spec.ring_format,
                                        TxlState::BuildTable(w_r, d, d, rows), std::move(u),
                                        std::move(v));
    }
    case AttentionType::kGsa:
    case AttentionType::kGla:
    case AttentionType::kRetnet:
    case AttentionType::kHgrn2:
    case AttentionType::kGatedDelta:
      break;  // Hugging Face layers only: AttentionLayer::LoadHf builds them
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported attention type ", AttentionTypeName(spec.type)));
}

}  // namespace abcd
