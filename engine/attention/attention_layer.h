// One attention sublayer: the projections (one matrix product for q|k|v|extra over every row of
// a step, one for the output) around a per-type AttentionState kernel that touches each
// sequence's state row by row. The state scans run on the context's threads, one task per
// (sequence, head): a sequence's rows stay in order within each head. Three uses:
//   ForwardCausal        decoder self attention; rows of one sequence must appear in order
//   ForwardBidirectional encoder self attention over one whole source (temporary state)
//   BuildMemory + ForwardCross   cross attention: memory built once from the encoder output
// 1/sqrt(dh) is folded into the query weights at load; the matrices are packed once in the
// model's weight format (engine/ops/packed_matrix.h). Immutable after Load; thread-safe (each
// caller brings its own CpuContext).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/attention/attention_state.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/packed_matrix.h"

namespace abcd {

class AttentionLayer {
 public:
  // What a loader (engine/model/attention_loader.h: abcd's tensor names and Hugging Face's)
  // assembles a layer from: the spec, the state kernel, the packed projections and where a
  // kernel row keeps its parts.
  struct Parts {
    AttentionSpec spec;
    int64_t d_model = 0;
    std::unique_ptr<AttentionState> state;
    // Self attention: fused [q; k; v; extra] rows. Cross: query = q only, fused = [k; v; extra].
    PackedMatrix fused, query, out;
    std::vector<float> fused_bias, query_bias, out_bias;
    KernelRowLayout layout;          // q at 0, then k, v, extra; the row width
    int64_t attended_width = 0;      // columns of a read row (the output projection's input)
    int64_t state_weight_bytes = 0;  // parameters the state keeps besides the matrices
  };
  static std::unique_ptr<AttentionLayer> FromParts(Parts parts);

  const AttentionSpec& spec() const { return spec_; }
  const AttentionState& state() const { return *state_; }
  // Weights as fp32 [out, in] (dequantised when packed as int8), for backends that keep their
  // own copy. Self attention: fused rows [q; k; v; extra] (q scaled by 1/sqrt(dh)); cross:
  // query_* = q, fused = [k; v; extra].
  std::vector<float> fused_weight() const { return fused_.ToFloat(); }
  const std::vector<float>& fused_bias() const { return fused_bias_; }
  std::vector<float> query_weight() const { return query_.ToFloat(); }
  const std::vector<float>& query_bias() const { return query_bias_; }
  std::vector<float> out_weight() const { return out_.ToFloat(); }
  const std::vector<float>& out_bias() const { return out_bias_; }
  // The packed matrices the CPU kernels read (benchmarks time them per op kind).
  const PackedMatrix& fused_matrix() const { return fused_; }
  const PackedMatrix& out_matrix() const { return out_; }
  // Bytes of parameters a forward pass reads (packed matrices, biases, feature maps).
  int64_t weight_bytes() const;
  // Multiply-adds of the projections one decoder token costs (cross: query and output only;
  // the memory's keys and values are projected once per source).
  int64_t projection_macs_per_token() const;

  // x: [rows, d] (normalised layer input), out: [rows, d]. x and out must not be the context's
  // kProjection or kAttended buffers.
  void ForwardCausal(CpuContext& ctx, const float* x, int64_t rows,
                     std::span<const StateRef> states, float* out) const;
  void ForwardBidirectional(CpuContext& ctx, const float* x, int64_t rows, float* out) const;
  void BuildMemory(CpuContext& ctx, const float* source, int64_t rows, const StateRef& state) const;
  void ForwardCross(CpuContext& ctx, const float* x, int64_t rows, std::span<const StateRef> states,
                    float* out) const;

 private:
  AttentionLayer() = default;
  KeyValueRow KeyValueAt(const float* projection_row, int64_t k_offset) const;
  // The kernels' input rows for `rows` projection rows: the projection itself, or the state's
  // prepared rows (written into the context's kPrepared buffer); sets `*width` to their stride.
  const float* KernelRows(CpuContext& ctx, const float* projection, int64_t rows,
                          std::span<const StateRef> states, int64_t* width) const;
  const float* fused_bias_or_null() const {
    return fused_bias_.empty() ? nullptr : fused_bias_.data();
  }
  const float* out_bias_or_null() const { return out_bias_.empty() ? nullptr : out_bias_.data(); }

  AttentionSpec spec_;
  int64_t d_model_ = 0;
  // Column offsets of k, v and extra in a kernel-input row (q at 0) and the row width;
  // attended_width_: columns of the kernels' output rows (the output projection's input).
  KernelRowLayout layout_;
  int64_t attended_width_ = 0;
  std::unique_ptr<AttentionState> state_;
  // Self attention: fused [q; k; v; extra] rows. Cross: query_ = q only, fused_ = [k; v; extra].
  PackedMatrix fused_, query_, out_;
  std::vector<float> fused_bias_, query_bias_, out_bias_;
  int64_t state_weight_bytes_ = 0;
};

}  // namespace abcd
