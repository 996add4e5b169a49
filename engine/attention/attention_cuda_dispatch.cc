#include "engine/attention/attention_cuda_dispatch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/attention/linear_state.h"
#include "engine/attention/short_conv.h"
#include "engine/attention/softmax_state.h"
#include "engine/core/status_macros.h"

namespace abcd::cuda {

absl::Status NoCudaKernel(absl::string_view where, absl::string_view what, bool plural) {
  return absl::UnimplementedError(absl::StrCat(where, ": ", what, plural ? " have" : " has",
                                               " no CUDA kernel; use the CPU backend"));
}

bool IsFeatureMapType(AttentionType type) {
  return type == AttentionType::kRfa || type == AttentionType::kT2r || type == AttentionType::kElu;
}

absl::Status CheckCudaKernel(const AttentionSpec& spec, absl::string_view where, bool cross) {
  if (cross && IsFeatureMapType(spec.type)) {
    return NoCudaKernel(where, absl::StrCat(AttentionTypeName(spec.type), " cross attention"));
  }
  if (spec.gmat_chunk >= 0) return NoCudaKernel(where, "gmat");
  if (spec.conv_size > 0 && !spec.is_fla_mixer()) {  // fla's short convolution (short_conv.h)
    return NoCudaKernel(where, absl::StrCat(AttentionTypeName(spec.type), " short convolution"));
  }
  switch (spec.type) {
    case AttentionType::kSoftmax:
    case AttentionType::kRfa:
    case AttentionType::kT2r:
    case AttentionType::kElu:
    case AttentionType::kGsa:
    case AttentionType::kGla:
    case AttentionType::kRetnet:
    case AttentionType::kHgrn2:
    case AttentionType::kGatedDelta:
      return absl::OkStatus();
    case AttentionType::kAbc:
      // The CUDA abc kernels implement exp control only (learned logits, running means).
      if (spec.control == AbcControl::kExp) return absl::OkStatus();
      return NoCudaKernel(
          where, absl::StrCat("abc attention with control \"", AbcControlName(spec.control), "\""));
    case AttentionType::kWindow:
      // The ring of the last `window` tokens (window_state_cuda.cu); not dilated windows.
      if (spec.dilation == 1) return absl::OkStatus();
      return NoCudaKernel(where, "dilated window attention");
    case AttentionType::kTxl:
      break;
  }
  return NoCudaKernel(where, absl::StrCat(AttentionTypeName(spec.type), " attention"));
}

namespace {

absl::StatusOr<DeviceArray<float>> Upload(CudaContext& context, const std::vector<float>& host,
                                          int64_t* bytes) {
  *bytes += static_cast<int64_t>(host.size()) * 4;
  return DeviceArray<float>::FromHost(context, host);
}

// rfa / t2r / elu: the feature map's parameters.
absl::Status UploadFeatureMap(CudaContext& context, const LinearState& linear,
                              CudaAttention& attention, int64_t* bytes) {
  LinearAttentionParams& params = attention.linear;
  params.n_heads = attention.n_heads;
  params.head_dim = attention.head_dim;
  params.gated = linear.gated();
  params.eps = linear.eps();
  if (const auto* rfa = dynamic_cast<const RandomFeatureMap*>(&linear.feature_map())) {
    params.kind = rfa->kernel() == RfaKernel::kGaussian ? FeatureMapKind::kRfaGaussian
                                                        : FeatureMapKind::kRfaArccos;
    params.random_features = rfa->random_features();
    ABCD_ASSIGN_OR_RETURN(attention.feature_projection, Upload(context, rfa->projection(), bytes));
  } else if (const auto* t2r = dynamic_cast<const LearnedReluFeatureMap*>(&linear.feature_map())) {
    params.kind = FeatureMapKind::kT2r;
    params.learned_features = t2r->features();
    ABCD_ASSIGN_OR_RETURN(attention.feature_projection, Upload(context, t2r->weight(), bytes));
    ABCD_ASSIGN_OR_RETURN(attention.feature_bias, Upload(context, t2r->bias(), bytes));
  } else {
    params.kind = FeatureMapKind::kElu;
  }
  params.projection = attention.feature_projection.data();
  params.bias = attention.feature_bias.data();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CudaAttention> UploadCudaAttention(CudaContext& context, const AttentionSpec& spec,
                                                  const AttentionState& state, int n_heads,
                                                  int head_dim, int64_t d_model,
                                                  absl::string_view where, int64_t* bytes) {
  ABCD_RETURN_IF_ERROR(CheckCudaKernel(spec, where, /*cross=*/false));
  CudaAttention attention;
  attention.type = spec.type;
  attention.n_heads = n_heads;
  attention.head_dim = head_dim;
  attention.kv_heads = n_heads;
  attention.k_offset = d_model;
  attention.attended_width = state.AttendedWidth(d_model);
  if (const auto* softmax = dynamic_cast<const SoftmaxState*>(&state); softmax != nullptr) {
    // Hugging Face layers: the state's own heads (Qwen3's head_dim need not be d / heads).
    attention.n_heads = softmax->q_heads();
    attention.kv_heads = softmax->kv_heads();
    attention.head_dim = softmax->head_dim();
    if (softmax->PreparedWidth() > 0) {
      attention.k_offset = int64_t{softmax->q_heads()} * softmax->head_dim();
    }
    ABCD_ASSIGN_OR_RETURN(attention.rope_inv_freq,
                          Upload(context, softmax->rope_inv_freq(), bytes));
    ABCD_ASSIGN_OR_RETURN(attention.q_norm, Upload(context, softmax->q_norm(), bytes));
    ABCD_ASSIGN_OR_RETURN(attention.k_norm, Upload(context, softmax->k_norm(), bytes));
    attention.norm_eps = softmax->norm_eps();
  }
  if (const auto* window = dynamic_cast<const WindowState*>(&state); window != nullptr) {
    // Sliding windows: the ring's shape; Hugging Face rows rotated in place as softmax's.
    if (window->dilation() != 1) return NoCudaKernel(where, "dilated window attention");
    attention.n_heads = window->q_heads();
    attention.kv_heads = window->kv_heads();
    attention.head_dim = window->head_dim();
    attention.window =
        WindowShape{window->q_heads(), window->kv_heads(), window->head_dim(), window->window()};
    if (window->PreparedWidth() > 0) {
      attention.k_offset = int64_t{window->q_heads()} * window->head_dim();
    }
    ABCD_ASSIGN_OR_RETURN(attention.rope_inv_freq, Upload(context, window->rope_inv_freq(), bytes));
    ABCD_ASSIGN_OR_RETURN(attention.q_norm, Upload(context, window->q_norm(), bytes));
    ABCD_ASSIGN_OR_RETURN(attention.k_norm, Upload(context, window->k_norm(), bytes));
    attention.norm_eps = window->norm_eps();
  }
  if (spec.is_fla_mixer()) {
    // fla's short convolution wraps the mixer's state (short_conv.h).
    const auto* conv = dynamic_cast<const ShortConvState*>(&state);
    const AttentionState& inner = conv != nullptr ? conv->inner() : state;
    int64_t projection_width = 0;
    if (spec.type == AttentionType::kGatedDelta) {
      ABCD_ASSIGN_OR_RETURN(attention.delta, UploadGatedDelta(context, inner, where, bytes));
      attention.attended_width = attention.delta.params.AttendedWidth();
      attention.scratch_width = attention.delta.params.PreparedWidth();
      projection_width = attention.delta.params.ProjectionWidth();
    } else {
      ABCD_ASSIGN_OR_RETURN(attention.fla, UploadFlaMixer(context, inner, where, bytes));
      attention.attended_width = attention.fla.attended_width;
      attention.scratch_width = attention.fla.prepared_width;
      projection_width = attention.fla.projection_width;
    }
    if ((conv != nullptr) != (spec.conv_size > 0)) {
      return absl::InternalError(absl::StrCat(where, ": conv_size ", spec.conv_size,
                                              conv != nullptr ? " with" : " without",
                                              " a short convolution state"));
    }
    if (conv != nullptr) {
      ABCD_ASSIGN_OR_RETURN(attention.conv,
                            UploadShortConv(context, state, projection_width, where, bytes));
      attention.has_conv = true;
      attention.scratch_width += attention.conv.width;
    }
  } else if (spec.type == AttentionType::kAbc) {
    attention.abc = AbcShape{n_heads, head_dim, spec.slots};
  } else if (IsFeatureMapType(spec.type)) {
    const auto* linear = dynamic_cast<const LinearState*>(&state);
    if (linear == nullptr) {
      return absl::InternalError(
          absl::StrCat(where, ": ", AttentionTypeName(spec.type), " layer without a LinearState"));
    }
    ABCD_RETURN_IF_ERROR(UploadFeatureMap(context, *linear, attention, bytes));
  }
  return attention;
}

namespace {

// An fla mixer or gated_deltanet, after fla's short convolution when the layer has one: the
// convolved rows (in the scratch after the prepared rows) feed the mixer, and the windows move
// on once it has run.
absl::Status LaunchFla(CudaContext& context, const CudaAttention& attention,
                       const int64_t* positions, float* scratch, const StepRows& rows) {
  StepRows inner = rows;
  if (attention.has_conv) {
    const int64_t prepared = attention.scratch_width - attention.conv.width;
    float* convolved = scratch + rows.batch * prepared;
    ABCD_RETURN_IF_ERROR(ShortConvRows(context, attention.conv, rows, convolved));
    inner.q = convolved;
    inner.q_stride = attention.conv.width;
  }
  if (attention.type == AttentionType::kGatedDelta) {
    ABCD_RETURN_IF_ERROR(GatedDeltaForward(context, attention.delta, inner, scratch));
  } else {
    ABCD_RETURN_IF_ERROR(FlaMixerForward(context, attention.fla, inner, positions, scratch));
  }
  return attention.has_conv ? ShortConvAdvance(context, attention.conv, rows) : absl::OkStatus();
}

}  // namespace

absl::Status LaunchCudaAttention(CudaContext& context, const CudaAttention& attention,
                                 float* projection, const int64_t* positions, float* scratch,
                                 const StepRows& rows, const KvCacheRows& cache) {
  switch (attention.type) {
    case AttentionType::kAbc:
      return AbcStep(context, attention.abc, rows, /*update=*/true);
    case AttentionType::kRfa:
    case AttentionType::kT2r:
    case AttentionType::kElu:
      return LinearAttentionStep(context, attention.linear, rows);
    case AttentionType::kSoftmax:
      ABCD_RETURN_IF_ERROR(PrepareRotaryRows(
          context, projection, rows.q_stride, rows.batch, attention.n_heads, attention.kv_heads,
          attention.head_dim, positions, attention.rope_inv_freq.data(), attention.q_norm.data(),
          attention.k_norm.data(), attention.norm_eps));
      return SoftmaxStep(context, attention.n_heads, attention.kv_heads, attention.head_dim, rows,
                         cache);
    case AttentionType::kGsa:
    case AttentionType::kGla:
    case AttentionType::kRetnet:
    case AttentionType::kHgrn2:
    case AttentionType::kGatedDelta:
      return LaunchFla(context, attention, positions, scratch, rows);
    case AttentionType::kWindow:
      ABCD_RETURN_IF_ERROR(PrepareRotaryRows(
          context, projection, rows.q_stride, rows.batch, attention.n_heads, attention.kv_heads,
          attention.head_dim, positions, attention.rope_inv_freq.data(), attention.q_norm.data(),
          attention.k_norm.data(), attention.norm_eps));
      return WindowStep(context, attention.window, rows, positions);
    case AttentionType::kTxl:
      break;
  }
  return absl::InternalError(
      absl::StrCat(AttentionTypeName(attention.type), " attention reached the CUDA forward pass"));
}

}  // namespace abcd::cuda
