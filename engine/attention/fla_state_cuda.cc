// UploadFlaMixer, UploadShortConv, UploadGatedDelta (fla_state_cuda.h): the device copies of the
// fla states' parameters, and the step kernels' launch plans.
#include "engine/attention/fla_state_cuda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/attention/attention_cuda_dispatch.h"
#include "engine/attention/gated_delta_state.h"
#include "engine/attention/gated_linear_state.h"
#include "engine/attention/gsa_state.h"
#include "engine/attention/short_conv.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {
namespace {

// Uploads `host` (when `expected` floats long; else InvalidArgument naming `what`).
absl::Status UploadArray(CudaContext& context, const std::vector<float>& host, int64_t expected,
                         absl::string_view where, absl::string_view what, DeviceArray<float>* out,
                         int64_t* bytes) {
  if (static_cast<int64_t>(host.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", what, " has ", host.size(), " floats, expected ", expected));
  }
  ABCD_ASSIGN_OR_RETURN(*out, DeviceArray<float>::FromHost(context, host));
  *bytes += expected * static_cast<int64_t>(sizeof(float));
  return absl::OkStatus();
}

absl::Status CheckHeads(const fla::Params& p, absl::string_view where) {
  if (p.heads <= 0 || p.kv_heads <= 0 || p.key_dim <= 0 || p.value_dim <= 0 ||
      p.heads % p.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": heads ", p.heads, ", kv_heads ",
                                                   p.kv_heads, ", key_dim ", p.key_dim,
                                                   ", value_dim ", p.value_dim));
  }
  return absl::OkStatus();
}

absl::Status UploadGatedLinear(CudaContext& context, const GatedLinearState& state,
                               absl::string_view where, CudaFlaMixer& mixer, int64_t* bytes) {
  const GatedLinearState::Options& o = state.options();
  fla::Params& p = mixer.params;
  p.heads = o.heads;
  p.kv_heads = o.kv_heads;
  p.key_dim = o.key_dim;
  p.value_dim = o.value_dim;
  p.q_scale = o.scale_query ? 1.0f / std::sqrt(static_cast<float>(o.key_dim)) : 1.0f;
  p.norm_eps = o.norm_eps;
  ABCD_RETURN_IF_ERROR(CheckHeads(p, where));
  const int64_t k_width = p.KWidth();
  switch (o.type) {
    case AttentionType::kGla:
      p.kind = fla::Kind::kGla;
      // GatedLinearState applies swish and relu to gla's q and k; any other map is the identity.
      p.feature = o.feature_map == MixerFeatureMap::kSwish  ? fla::Feature::kSilu
                  : o.feature_map == MixerFeatureMap::kRelu ? fla::Feature::kRelu
                                                            : fla::Feature::kNone;
      p.output_gate = o.output_gate;
      p.has_clamp = o.has_clamp;
      p.clamp_min = o.clamp_min;
      p.inv_gate_normalizer = 1.0f / o.gate_normalizer;
      p.gate_rank = o.gate_rank;
      if (o.gate_rank <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": gla gate rank ", o.gate_rank));
      }
      ABCD_RETURN_IF_ERROR(UploadArray(context, o.gate_up_weight, k_width * o.gate_rank, where,
                                       "gla gate_up_weight", &mixer.gate_up_weight, bytes));
      ABCD_RETURN_IF_ERROR(UploadArray(context, o.gate_up_bias, k_width, where, "gla gate_up_bias",
                                       &mixer.gate_up_bias, bytes));
      break;
    case AttentionType::kRetnet:
      p.kind = fla::Kind::kRetnet;
      p.output_gate = o.output_gate;
      if (o.key_dim % 2 != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": retnet key_dim ", o.key_dim, " is odd (RoPE rotates pairs)"));
      }
      ABCD_RETURN_IF_ERROR(UploadArray(context, o.rope_inv_freq, o.key_dim / 2, where,
                                       "retnet rope_inv_freq", &mixer.rope_inv_freq, bytes));
      ABCD_RETURN_IF_ERROR(UploadArray(context, state.retnet_decay(), o.heads, where,
                                       "retnet decay", &mixer.retnet_decay, bytes));
      break;
    case AttentionType::kHgrn2:
      p.kind = fla::Kind::kHgrn2;
      if (o.kv_heads != o.heads) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": hgrn2 with ", o.kv_heads, " kv heads for ", o.heads, " heads"));
      }
      if (!o.lower_bound.empty()) {
        ABCD_RETURN_IF_ERROR(UploadArray(context, o.lower_bound, k_width, where,
                                         "hgrn2 lower_bound", &mixer.lower_bound, bytes));
      }
      break;
    default:
      return NoCudaKernel(where, absl::StrCat(AttentionTypeName(o.type), " gated linear state"));
  }
  mixer.type = o.type;
  const int64_t norm = p.kind == fla::Kind::kHgrn2 ? p.AttendedWidth() : int64_t{p.value_dim};
  ABCD_RETURN_IF_ERROR(
      UploadArray(context, o.norm_weight, norm, where, "norm_weight", &mixer.norm_weight, bytes));
  return absl::OkStatus();
}

absl::Status UploadGsa(CudaContext& context, const GsaState& state, absl::string_view where,
                       CudaFlaMixer& mixer, int64_t* bytes) {
  fla::Params& p = mixer.params;
  p.kind = fla::Kind::kGsa;
  p.heads = state.heads();
  p.kv_heads = state.kv_heads();
  p.key_dim = state.key_dim();
  p.value_dim = state.value_dim();
  p.slots = state.slots();
  p.inv_gate_normalizer = 1.0f / state.gate_normalizer();
  p.norm_eps = state.norm_eps();
  ABCD_RETURN_IF_ERROR(CheckHeads(p, where));
  if (p.slots <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": gsa slots ", p.slots));
  }
  switch (state.feature_map()) {
    case MixerFeatureMap::kNone:
      p.feature = fla::Feature::kNone;
      break;
    case MixerFeatureMap::kSwish:
      p.feature = fla::Feature::kSilu;
      break;
    case MixerFeatureMap::kRelu:
      p.feature = fla::Feature::kRelu;
      break;
    case MixerFeatureMap::kT2r:
      p.feature = fla::Feature::kT2r;
      ABCD_RETURN_IF_ERROR(UploadArray(context, state.t2r_weight(), int64_t{p.key_dim} * p.key_dim,
                                       where, "gsa t2r weight", &mixer.t2r_weight, bytes));
      break;
  }
  mixer.type = AttentionType::kGsa;
  return UploadArray(context, state.norm_weight(), p.AttendedWidth(), where, "gsa norm_weight",
                     &mixer.norm_weight, bytes);
}

}  // namespace

absl::StatusOr<CudaFlaMixer> UploadFlaMixer(CudaContext& context, const AttentionState& state,
                                            absl::string_view where, int64_t* bytes) {
  CudaFlaMixer mixer;
  if (const auto* gated = dynamic_cast<const GatedLinearState*>(&state)) {
    ABCD_RETURN_IF_ERROR(UploadGatedLinear(context, *gated, where, mixer, bytes));
  } else if (const auto* gsa = dynamic_cast<const GsaState*>(&state)) {
    ABCD_RETURN_IF_ERROR(UploadGsa(context, *gsa, where, mixer, bytes));
  } else {
    return NoCudaKernel(where, "this attention state (not gla, retnet, hgrn2 or gsa)");
  }
  fla::Params& p = mixer.params;
  p.gate_up_weight = mixer.gate_up_weight.data();
  p.gate_up_bias = mixer.gate_up_bias.data();
  p.rope_inv_freq = mixer.rope_inv_freq.data();
  p.retnet_decay = mixer.retnet_decay.data();
  p.lower_bound = mixer.lower_bound.data();  // null when empty: unbounded
  p.t2r_weight = mixer.t2r_weight.data();
  p.norm_weight = mixer.norm_weight.data();
  mixer.projection_width = p.ProjectionWidth();
  mixer.prepared_width = p.PreparedWidth();
  mixer.attended_width = p.AttendedWidth();
  mixer.state_floats = state.FixedFloats();
  if (mixer.prepared_width != state.PreparedWidth()) {
    return absl::InternalError(absl::StrCat(where, ": prepared width ", mixer.prepared_width,
                                            " on the device, ", state.PreparedWidth(),
                                            " on the CPU"));
  }
  return mixer;
}

absl::StatusOr<CudaShortConv> UploadShortConv(CudaContext& context, const AttentionState& state,
                                              int64_t inner_projection_width,
                                              absl::string_view where, int64_t* bytes) {
  const auto* conv = dynamic_cast<const ShortConvState*>(&state);
  if (conv == nullptr) return NoCudaKernel(where, "this state (not a short convolution)");
  const ShortConvState::Options& o = conv->options();
  if (o.channels <= 0 || o.size <= 0 || o.channels > inner_projection_width) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": short convolution of ", o.channels, " channels and ", o.size,
                     " taps over projection rows of ", inner_projection_width, " floats"));
  }
  CudaShortConv out;
  const int64_t C = o.channels;
  ABCD_RETURN_IF_ERROR(
      UploadArray(context, o.weight, C * o.size, where, "short conv weight", &out.weight, bytes));
  if (!o.bias.empty()) {
    ABCD_RETURN_IF_ERROR(
        UploadArray(context, o.bias, C, where, "short conv bias", &out.bias, bytes));
  }
  fla::ConvParams& p = out.params;
  p.channels = o.channels;
  p.size = o.size;
  p.silu = o.silu;
  p.inner_floats = conv->inner().FixedFloats();
  p.weight = out.weight.data();
  p.bias = out.bias.data();  // null without a bias
  out.width = inner_projection_width;
  return out;
}

absl::StatusOr<CudaGatedDelta> UploadGatedDelta(CudaContext& context, const AttentionState& state,
                                                absl::string_view where, int64_t* bytes) {
  const auto* delta = dynamic_cast<const GatedDeltaState*>(&state);
  if (delta == nullptr) return NoCudaKernel(where, "this state (not gated_deltanet)");
  const GatedDeltaState::Options& o = delta->options();
  if (o.heads <= 0 || o.kv_heads <= 0 || o.key_dim <= 0 || o.value_dim <= 0 ||
      o.heads % o.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": gated_deltanet heads ", o.heads,
                                                   ", kv_heads ", o.kv_heads, ", key_dim ",
                                                   o.key_dim, ", value_dim ", o.value_dim));
  }
  CudaGatedDelta out;
  fla::DeltaParams& p = out.params;
  p.heads = o.heads;
  p.kv_heads = o.kv_heads;
  p.key_dim = o.key_dim;
  p.value_dim = o.value_dim;
  p.output_gate = o.output_gate;
  p.allow_neg_eigval = o.allow_neg_eigval;
  p.silu_qkv = o.silu_qkv;
  p.norm_eps = o.norm_eps;
  std::vector<float> minus_a;
  for (float a : o.a_log) minus_a.push_back(-std::exp(a));  // as GatedDeltaState
  ABCD_RETURN_IF_ERROR(
      UploadArray(context, minus_a, o.heads, where, "gated_deltanet A_log", &out.minus_a, bytes));
  ABCD_RETURN_IF_ERROR(UploadArray(context, o.dt_bias, o.heads, where, "gated_deltanet dt_bias",
                                   &out.dt_bias, bytes));
  ABCD_RETURN_IF_ERROR(UploadArray(context, o.norm_weight, o.value_dim, where,
                                   "gated_deltanet o_norm weight", &out.norm_weight, bytes));
  p.minus_a = out.minus_a.data();
  p.dt_bias = out.dt_bias.data();
  p.norm_weight = out.norm_weight.data();
  out.state_floats = state.FixedFloats();
  if (p.PreparedWidth() != state.PreparedWidth()) {
    return absl::InternalError(absl::StrCat(where, ": gated_deltanet prepared width ",
                                            p.PreparedWidth(), " on the device, ",
                                            state.PreparedWidth(), " on the CPU"));
  }
  return out;
}

namespace internal {

absl::StatusOr<GatedDeltaPlan> PlanGatedDeltaStep(const fla::DeltaParams& p, int64_t sequences) {
  ABCD_RETURN_IF_ERROR(CheckGridRows("gated delta step", sequences));
  if (p.heads <= 0 || p.key_dim <= 0 || p.value_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gated delta step: heads ", p.heads, ", key_dim ", p.key_dim, ", value_dim ", p.value_dim));
  }
  GatedDeltaPlan plan;
  plan.tiles = (p.value_dim + 31) / 32;
  const int64_t blocks = int64_t{p.heads} * plan.tiles;
  if (blocks > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("gated delta step: ", blocks, " blocks a row"));
  }
  constexpr int kWarps = kFlaStepThreads / 32;
  const int64_t floats = 2 * int64_t{p.key_dim} + kWarps * 32;
  if (floats * 4 > kDefaultSharedMemoryBytes) {  // K up to 6,080
    return absl::InvalidArgumentError(
        absl::StrCat("gated delta step: key_dim ", p.key_dim, " needs ", floats * 4,
                     " bytes of shared memory, more than ", kDefaultSharedMemoryBytes));
  }
  plan.shared_bytes = static_cast<size_t>(floats) * sizeof(float);
  return plan;
}

absl::StatusOr<GatedLinearPlan> PlanGatedLinearStep(const fla::Params& p, int64_t batch,
                                                    int64_t sequences, int64_t longest_run,
                                                    int sm_count) {
  constexpr int kWarps = kFlaStepThreads / 32;
  GatedLinearPlan plan;
  const int K = p.key_dim, V = p.value_dim;
  plan.vec = V % 4 == 0 ? 4 : 1;
  const int tile = 32 * plan.vec;
  plan.tiles = (V + tile - 1) / tile;
  ABCD_RETURN_IF_ERROR(CheckGridRows("gated linear step", sequences));
  const int64_t blocks = SplitBlocks(sequences, p.heads * plan.tiles, longest_run);
  // Shared memory: q, k, lambda per key row of the block | v and the warps' sums per column.
  const int64_t max_chunk = MaxChunkForSharedMemory(int64_t{tile} * (1 + kWarps), 3);
  ABCD_ASSIGN_OR_RETURN(plan.split, PlanSplits("gated linear step", K, blocks, sm_count,
                                               /*min_chunk=*/16, max_chunk));
  const int64_t row_floats = batch * p.AttendedWidth();
  if (plan.split.splits > 1 &&
      row_floats * plan.split.splits * int64_t{sizeof(float)} > kFlaMaxPartialBytes) {
    const int64_t most =
        std::max<int64_t>(1, kFlaMaxPartialBytes / (row_floats * int64_t{sizeof(float)}));
    ABCD_ASSIGN_OR_RETURN(plan.split,
                          PlanSplits("gated linear step", K, blocks, sm_count,
                                     static_cast<int>((K + most - 1) / most), max_chunk));
  }
  plan.partial_floats = plan.split.splits > 1 ? row_floats * plan.split.splits : 0;
  plan.shared_bytes = sizeof(float) * (3 * static_cast<size_t>(plan.split.chunk) +
                                       static_cast<size_t>(tile) * (1 + kWarps));
  return plan;
}

absl::StatusOr<GsaPlan> PlanGsaStep(const fla::Params& p, int64_t batch, int64_t sequences,
                                    int64_t longest_run, int sm_count) {
  GsaPlan plan;
  const int K = p.key_dim, V = p.value_dim, n = p.slots;
  plan.vec = (K % 4 == 0 && V % 4 == 0) ? 4 : 1;
  plan.value_span = std::min(V / plan.vec, kFlaStepThreads);
  plan.value_groups = kFlaStepThreads / plan.value_span;
  ABCD_RETURN_IF_ERROR(CheckGridRows("gsa step", sequences));
  // Splits of at least 4 slots each; none when the split-K combine (at most 4 columns a thread)
  // cannot take the value width. Shared memory: q, k [K] | v [V] | the value partials
  // [groups, V] | stats [2], and an alpha and a score per slot of the block.
  const int min_chunk = V <= 4 * kFlaStepThreads ? 4 : n;
  const int64_t fixed = 2 * int64_t{K} + V + int64_t{plan.value_groups} * V + 2;
  ABCD_ASSIGN_OR_RETURN(
      plan.split, PlanSplits("gsa step", n, SplitBlocks(sequences, p.heads, longest_run), sm_count,
                             min_chunk, MaxChunkForSharedMemory(fixed, 2)));
  if (plan.split.splits > 1) ABCD_RETURN_IF_ERROR(CheckGridRows("gsa combine", batch));
  plan.partial_floats =
      plan.split.splits > 1 ? batch * p.heads * plan.split.splits * (int64_t{V} + 2) : 0;
  plan.shared_bytes = sizeof(float) * static_cast<size_t>(fixed + 2 * int64_t{plan.split.chunk});
  return plan;
}

}  // namespace internal
}  // namespace abcd::cuda
