// CudaModel's weight upload: the CPU Model's parameters copied to the device once (projections
// in the chosen WeightType for cuBLAS; LayerNorm, biases and the embedding gather table in
// fp32), each decoder layer's attention through UploadCudaAttention (which refuses a layer
// without a CUDA kernel), and the layout of a sequence's fixed state block.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/model_cuda.h"

namespace abcd::cuda {
namespace {

absl::StatusOr<DeviceArray<float>> ToDevice(CudaContext& context, const std::vector<float>& host,
                                            int64_t* bytes) {
  *bytes += static_cast<int64_t>(host.size()) * 4;
  return DeviceArray<float>::FromHost(context, host);
}

absl::StatusOr<DeviceMatrix> MatrixToDevice(CudaContext& context, const std::vector<float>& host,
                                            int64_t out, WeightType type, int64_t* bytes) {
  const int64_t in = static_cast<int64_t>(host.size()) / out;
  ABCD_ASSIGN_OR_RETURN(DeviceMatrix matrix,
                        DeviceMatrix::Upload(context, host.data(), out, in, type));
  *bytes += matrix.bytes();
  return matrix;
}

int64_t RoundUp4(int64_t floats) { return (floats + 3) / 4 * 4; }

}  // namespace

absl::StatusOr<CudaModel::Layer> CudaModel::UploadLayer(const Model::Block& block, size_t index,
                                                        std::vector<float>& empty_state) {
  const int64_t d = config_.d_model;
  const WeightType type = options_.weights;
  int64_t& bytes = weight_bytes_;
  const AttentionLayer& attention = *block.self_attention;
  const AttentionState& state = attention.state();
  Layer layer;
  ABCD_ASSIGN_OR_RETURN(layer.attention,
                        UploadCudaAttention(context_, attention.spec(), state, config_.n_heads,
                                            static_cast<int>(config_.head_dim()), d,
                                            absl::StrCat("decoder_layers[", index, "]"), &bytes));
  // The fused projection's rows (its bias may be absent: Llama's q/k/v have none).
  layer.fused_width = attention.fused_matrix().out();
  ABCD_ASSIGN_OR_RETURN(layer.ln1_weight, ToDevice(context_, block.ln1_weight, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.ln1_bias, ToDevice(context_, block.ln1_bias, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.ln2_weight, ToDevice(context_, block.ln2_weight, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.ln2_bias, ToDevice(context_, block.ln2_bias, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.fused, MatrixToDevice(context_, attention.fused_weight(),
                                                    layer.fused_width, type, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.fused_bias, ToDevice(context_, attention.fused_bias(), &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.out,
                        MatrixToDevice(context_, attention.out_weight(), d, type, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.out_bias, ToDevice(context_, attention.out_bias(), &bytes));
  // SwiGLU blocks: fc1 holds the gate and up rows (2 ff).
  ABCD_ASSIGN_OR_RETURN(
      layer.fc1, MatrixToDevice(context_, block.fc1.ToFloat(), block.fc1.out(), type, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.fc1_bias, ToDevice(context_, block.fc1_bias, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.fc2, MatrixToDevice(context_, block.fc2.ToFloat(), d, type, &bytes));
  ABCD_ASSIGN_OR_RETURN(layer.fc2_bias, ToDevice(context_, block.fc2_bias, &bytes));
  if (layer.attention.type == AttentionType::kSoftmax) {
    layer.softmax_index = 0;
    for (const Layer& earlier : layers_) layer.softmax_index += earlier.softmax_index >= 0;
    const int64_t kv_width = int64_t{layer.attention.kv_heads} * layer.attention.head_dim;
    if (kv_width_ != 0 && kv_width_ != kv_width) {
      return absl::UnimplementedError(absl::StrCat(
          "decoder_layers[", index, "]: softmax layers of different key/value widths (", kv_width_,
          " and ", kv_width, ") have no CUDA path; use the CPU backend"));
    }
    kv_width_ = kv_width;
    kv_bytes_per_token_ += 2 * kv_width * 4;
  }
  if (!state.UsesKvCache()) {
    // Each layer's block starts 16-byte aligned (the kernels use float4 loads).
    layer.state_offset = static_cast<int64_t>(empty_state.size());
    layer.state_floats = state.FixedFloats();
    empty_state.resize(RoundUp4(layer.state_offset + state.FixedFloats()));
    state.Init(empty_state.data() + layer.state_offset);
  }
  return layer;
}

absl::StatusOr<std::vector<float>> CudaModel::UploadWeights(const Model& model) {
  const int64_t d = config_.d_model, vocab = config_.vocab_size;
  int64_t& bytes = weight_bytes_;
  embed_scale_ = config_.scale_embeddings ? std::sqrt(static_cast<float>(d)) : 1.0f;
  ABCD_ASSIGN_OR_RETURN(embedding_, ToDevice(context_, model.embedding(), &bytes));
  ABCD_ASSIGN_OR_RETURN(lm_head_,
                        MatrixToDevice(context_, model.lm_head(), vocab, options_.weights, &bytes));
  ABCD_ASSIGN_OR_RETURN(ln_f_weight_, ToDevice(context_, model.decoder().ln_f_weight, &bytes));
  ABCD_ASSIGN_OR_RETURN(ln_f_bias_, ToDevice(context_, model.decoder().ln_f_bias, &bytes));
  std::vector<float> empty_state;
  for (size_t l = 0; l < model.decoder().blocks.size(); ++l) {
    ABCD_ASSIGN_OR_RETURN(Layer layer, UploadLayer(model.decoder().blocks[l], l, empty_state));
    layers_.push_back(std::move(layer));
  }
  return empty_state;
}

}  // namespace abcd::cuda
