// The one place that says which attention types have a CUDA kernel, and that launches them:
// softmax (KV cache, split-K; with GQA, RoPE and q/k norms for Hugging Face layers), sliding
// windows without dilation (a ring in the state block, likewise), abc with exp
// control, rfa / t2r / elu self attention (attention_state_cuda.h), the fla mixers gsa, gla,
// retnet and hgrn2 and gated_deltanet, with or without fla's short convolution
// (fla_state_cuda.h). Every other type, control or form is refused here, with one message:
// "<where>: <what> has no CUDA kernel; use the CPU backend" (UNIMPLEMENTED, so that
// --device auto serves the model on the CPU). CudaModel (engine/model/model_cuda.h) calls
// CheckCudaKernel for every attention of a model before it uploads anything, then
// UploadCudaAttention per decoder layer and LaunchCudaAttention per layer and pass.
// Thread-safety: plain functions; a CudaAttention is immutable after upload.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/attention/attention_spec.h"
#include "engine/attention/attention_state.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/fla_state_cuda.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

// UNIMPLEMENTED "<where>: <what> has no CUDA kernel; use the CPU backend" ("have" when
// `plural`): the refusal, written once.
absl::Status NoCudaKernel(absl::string_view where, absl::string_view what, bool plural = false);

// OK when `spec` has a CUDA kernel; else NoCudaKernel naming `where` (e.g. "decoder_layers[2]"
// or "decoder_layers[0].cross_attention") and the type, the abc control, "gmat", or for
// feature-map (rfa, t2r, elu) cross attention "<type> cross attention". `cross`: the spec is
// a decoder layer's cross attention.
absl::Status CheckCudaKernel(const AttentionSpec& spec, absl::string_view where, bool cross);

// True for the types whose cross attention has no CUDA kernel although their self attention
// has one (rfa, t2r, elu: the feature maps).
bool IsFeatureMapType(AttentionType type);

// One decoder layer's self attention on the device: the kernel and what it reads besides the
// step's rows and states.
struct CudaAttention {
  AttentionType type = AttentionType::kSoftmax;
  int n_heads = 0;
  int head_dim = 0;
  AbcShape abc;                  // abc
  LinearAttentionParams linear;  // rfa, t2r, elu: projection / bias point into feature_*
  DeviceArray<float> feature_projection, feature_bias;
  // Softmax: the key/value heads (GQA; n_heads for abcd's own layers) and, for Hugging Face
  // layers, RoPE's inverse frequencies and Qwen3's per-head q/k norms (empty: none), applied to
  // the projection rows in place before the cache append (PrepareRotaryRows).
  int kv_heads = 0;
  DeviceArray<float> rope_inv_freq, q_norm, k_norm;
  WindowShape window;  // sliding windows (also use the rotary tables and norms above)
  float norm_eps = 0.0f;
  // Where a projection row's k starts (q at 0) and the width of a read row (the output
  // projection's input): d_model each for abcd's own layers.
  int64_t k_offset = 0;
  int64_t attended_width = 0;
  // gsa, gla, retnet, hgrn2 (fla_state_cuda.h): the mixer between the projections, and the
  // scratch floats per row it needs (0 for every other type).
  CudaFlaMixer fla;
  int64_t scratch_width = 0;
  // gated_deltanet (fla_state_cuda.h).
  CudaGatedDelta delta;
  // fla's short convolution in front of the fla mixer or gated_deltanet (has_conv): its rows
  // follow the mixer's prepared rows in the scratch (scratch_width covers both).
  bool has_conv = false;
  CudaShortConv conv;
};

// The device side of `state` (a decoder layer's self attention of `spec`): the feature maps of
// rfa and t2r, the rotary tables and q/k norms of Hugging Face softmax layers are uploaded,
// adding their bytes to `*bytes`. NoCudaKernel for a spec without a kernel (CheckCudaKernel).
// `d_model`: the model width (abcd's own layers read q|k|v|extra of d_model columns each).
absl::StatusOr<CudaAttention> UploadCudaAttention(CudaContext& context, const AttentionSpec& spec,
                                                  const AttentionState& state, int n_heads,
                                                  int head_dim, int64_t d_model,
                                                  absl::string_view where, int64_t* bytes);

// Enqueues the layer's kernel over `rows` (self attention: the state is updated, then read).
// `projection` is rows.q as a mutable pointer: the rows Hugging Face softmax layers rotate in
// place; `positions` [rows] the rows' positions in their sequences (device); `scratch`
// rows * scratch_width floats (fla mixers). `cache` is read by softmax layers only.
absl::Status LaunchCudaAttention(CudaContext& context, const CudaAttention& attention,
                                 float* projection, const int64_t* positions, float* scratch,
                                 const StepRows& rows, const KvCacheRows& cache);

}  // namespace abcd::cuda
