// CudaModel's forward pass: the decoder's one layer loop (engine/model/decoder_forward.h) over
// the device's ops, enqueued on the context's stream (eagerly or into a CUDA graph).
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/decoder_forward.h"
#include "engine/model/model_cuda.h"
#include "engine/ops/elementwise_cuda.h"

namespace abcd::cuda {

// The CUDA backend's DecoderOps for one enqueued pass over the staged rows: kResidual is x_,
// kNormed the next projection's input (rounded_ in the weights' 16-bit type, or normed_ for fp32
// weights); bias and residual adds run in the GEMMs' epilogues, and each projection's input is
// rounded by the op that produces it (the norm, the activation). Post-norm blocks and cross
// attention are refused by Create (CheckCudaSupport) before a pass can reach them.
class CudaModel::CudaPass final : public DecoderOps {
 public:
  CudaPass(CudaModel& model, int64_t rows, int32_t max_length, int64_t scan_sequences,
           int64_t scan_longest_run, bool lm_head, bool checkpoints)
      : m_(model),
        ctx_(model.context_),
        rows_(rows),
        max_length_(max_length),
        scan_sequences_(scan_sequences),
        scan_longest_run_(scan_longest_run),
        lm_head_(lm_head),
        checkpoints_(checkpoints),
        d_(model.config_.d_model),
        ff_(model.config_.d_ff),
        eps_(model.config_.layer_norm_eps),
        rounded_(model.options_.weights != WeightType::kF32),
        input_(rounded_ ? static_cast<void*>(model.rounded_.data()) : model.normed_.data()) {}

  absl::Status Embed() override {
    const int64_t* positions =
        m_.config_.positional == Positional::kSinusoidal ? m_.token_positions_.data() : nullptr;
    return cuda::Embed(ctx_, m_.embedding_.data(), m_.tokens_.data(), positions, rows_, d_,
                       m_.embed_scale_, m_.x_.data());
  }

  absl::Status Norm(int layer, BlockNorm which, DecoderBuffer from, DecoderBuffer to) override {
    if (from != DecoderBuffer::kResidual || to != DecoderBuffer::kNormed ||
        which == BlockNorm::kCross) {
      return Unsupported("a post-norm block or cross attention");
    }
    const Layer& l = m_.layers_[static_cast<size_t>(layer)];
    const bool attention = which == BlockNorm::kAttention;
    const DeviceArray<float>& weight = attention ? l.ln1_weight : l.ln2_weight;
    if (m_.config_.norm_kind == NormKind::kRmsNorm) {
      return RmsNormRounded(ctx_, m_.x_.data(), rows_, d_, weight.data(), eps_, m_.options_.weights,
                            input_);
    }
    return LayerNormRounded(ctx_, m_.x_.data(), rows_, d_, weight.data(),
                            (attention ? l.ln1_bias : l.ln2_bias).data(), eps_, m_.options_.weights,
                            input_);
  }

  absl::Status SelfAttention(int layer, DecoderBuffer from, DecoderBuffer into) override {
    if (from != DecoderBuffer::kNormed || into != DecoderBuffer::kResidual) {
      return Unsupported("a post-norm block");
    }
    const size_t index = static_cast<size_t>(layer);
    const Layer& l = m_.layers_[index];
    const int64_t stride = m_.max_rows_;
    float* fused = m_.fused_.data();
    ABCD_RETURN_IF_ERROR(LinearRounded(ctx_, input_, rows_, l.fused, l.fused_bias.data(), fused));
    StepRows step{rows_,
                  fused,
                  l.fused_width,
                  fused + l.attention.k_offset,
                  l.fused_width,
                  m_.state_pointers_.data() + index * stride,
                  m_.attended_.data(),
                  l.attention.attended_width};
    if (scan_sequences_ > 0 && l.softmax_index < 0) {
      step.sequences = scan_sequences_;
      step.longest_run = scan_longest_run_;
      step.first = m_.scan_first_.data();
      step.count = m_.scan_count_.data();
      if (checkpoints_) step.checkpoints = m_.checkpoint_pointers_.data() + index * stride;
    }
    KvCacheRows cache;  // softmax layers: their rows of the KV caches
    if (l.softmax_index >= 0) {
      cache = {m_.key_pointers_.data() + l.softmax_index * stride,
               m_.value_pointers_.data() + l.softmax_index * stride, m_.lengths_.data(),
               max_length_};
    }
    ABCD_RETURN_IF_ERROR(LaunchCudaAttention(ctx_, l.attention, fused, m_.token_positions_.data(),
                                             m_.scratch_.data(), step, cache));
    return Linear(ctx_, m_.attended_.data(), rows_, l.out, l.out_bias.data(), m_.x_.data(),
                  LinearOutput::kAccumulate);
  }

  absl::Status CrossAttention(int, DecoderBuffer, DecoderBuffer) override {
    return Unsupported("cross attention");
  }

  absl::Status FeedForward(int layer, DecoderBuffer from, DecoderBuffer into) override {
    if (from != DecoderBuffer::kNormed || into != DecoderBuffer::kResidual) {
      return Unsupported("a post-norm block");
    }
    const Layer& l = m_.layers_[static_cast<size_t>(layer)];
    float* hidden = m_.hidden_.data();
    ABCD_RETURN_IF_ERROR(LinearRounded(ctx_, input_, rows_, l.fc1, l.fc1_bias.data(), hidden));
    // The second projection's input: rounded_ for 16-bit weights; for fp32 the activation in
    // place, or SwiGLU's [rows, ff] product in gated_ (it cannot overwrite its gate | up rows).
    void* ffn_input = rounded_ ? static_cast<void*>(m_.rounded_.data()) : hidden;
    if (m_.config_.activation == Activation::kSwiGlu) {
      if (!rounded_) ffn_input = m_.gated_.data();
      ABCD_RETURN_IF_ERROR(SwiGluRounded(ctx_, hidden, rows_, ff_, m_.options_.weights, ffn_input));
    } else {
      ABCD_RETURN_IF_ERROR(ActivateRounded(ctx_, m_.config_.activation, hidden, rows_ * ff_,
                                           m_.options_.weights, ffn_input));
    }
    return LinearRounded(ctx_, ffn_input, rows_, l.fc2, l.fc2_bias.data(), m_.x_.data(),
                         LinearOutput::kAccumulate);
  }

  // The final norm into normed_ (fp32: Forward() gathers the rows it wants from there), then the
  // LM head over every row when asked.
  absl::Status Output(DecoderBuffer output, bool final_norm) override {
    if (output != DecoderBuffer::kResidual || !final_norm) return Unsupported("a post-norm stack");
    if (m_.config_.norm_kind == NormKind::kRmsNorm) {
      ABCD_RETURN_IF_ERROR(
          RmsNorm(ctx_, m_.x_.data(), rows_, d_, m_.ln_f_weight_.data(), eps_, m_.normed_.data()));
    } else {
      ABCD_RETURN_IF_ERROR(LayerNorm(ctx_, m_.x_.data(), rows_, d_, m_.ln_f_weight_.data(),
                                     m_.ln_f_bias_.data(), eps_, m_.normed_.data()));
    }
    if (!lm_head_) return absl::OkStatus();
    return Linear(ctx_, m_.normed_.data(), rows_, m_.lm_head_, nullptr, m_.logits_.data());
  }

 private:
  static absl::Status Unsupported(absl::string_view what) {
    return absl::InternalError(absl::StrCat(what, " reached the CUDA forward pass"));
  }

  CudaModel& m_;
  CudaContext& ctx_;
  const int64_t rows_;
  const int32_t max_length_;
  const int64_t scan_sequences_, scan_longest_run_;
  const bool lm_head_, checkpoints_;
  const int64_t d_, ff_;
  const float eps_;
  const bool rounded_;
  void* const input_;
};

absl::Status CudaModel::EnqueueForward(int64_t rows, int32_t max_length, int64_t scan_sequences,
                                       int64_t scan_longest_run, bool lm_head, bool checkpoints) {
  CudaPass pass(*this, rows, max_length, scan_sequences, scan_longest_run, lm_head, checkpoints);
  return RunDecoder(config_, pass);
}

}  // namespace abcd::cuda
