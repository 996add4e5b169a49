// The fla mixers on the device (the CUDA twins of GatedLinearState for gla, retnet and hgrn2,
// and of GsaState): one layer between its fused projection and its output projection, as three
// launches (four with a split step):
//   prepare (one block per row: fla_math.h's PrepareElement per column: feature maps, gates,
//   RoPE, gla's rank-16 gate up-projection) -> step (gated_linear_state_cuda.cu: per (sequence,
//   head, column tile, key split) a block keeps its slice of S [K, V] in global memory, one
//   value column per lane, and scans its rows in order; gsa_state_cuda.cu: per (sequence, head,
//   slot split) as abc's kernel, a softmax over the slots between the K~ and V~ passes) ->
//   finish (split partials summed, output RMSNorm per head or per row, swish gate).
// The state blocks keep exactly the CPU layout (GatedLinearState: per head S [K, V]; GsaState:
// per head K~ [slots, K] then V~ [slots, V]), fp32, so state bytes move between backends.
// Also here: fla's short convolution in front of any of them (ShortConvRows before the mixer,
// ShortConvAdvance after it; short_conv_cuda.cu) and gated_deltanet (GatedDeltaForward;
// gated_delta_cuda.cu), whose per-element math is fla_math.h's too.
// Thread-safety: the Cuda* parameter structs are immutable after upload; calls on one context
// are serial.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/attention/attention_spec.h"
#include "engine/attention/attention_state.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/fla_math.h"
#include "engine/attention/split_plan.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

// One fla mixer layer's device parameters (immutable after upload).
struct CudaFlaMixer {
  AttentionType type = AttentionType::kGla;
  // Shapes and options; its pointers point into the arrays below.
  fla::Params params;
  DeviceArray<float> gate_up_weight, gate_up_bias;  // gla
  DeviceArray<float> rope_inv_freq, retnet_decay;   // retnet
  DeviceArray<float> lower_bound;                   // hgrn2 (layers > 0)
  DeviceArray<float> t2r_weight;                    // gsa with the t2r feature map
  DeviceArray<float> norm_weight;
  int64_t projection_width = 0;  // floats of a projection row the layer reads (q_stride >= it)
  int64_t prepared_width = 0;    // floats per row of the scratch FlaMixerForward needs
  int64_t attended_width = 0;    // floats per attended row (H V)
  int64_t state_floats = 0;      // the state block (FixedFloats())
};

// The device copy of `state`, a GatedLinearState (gla, retnet, hgrn2) or a GsaState; adds the
// uploaded bytes to *bytes. UNIMPLEMENTED (NoCudaKernel naming `where`) for any other state or
// an option without a kernel; InvalidArgument for inconsistent shapes.
absl::StatusOr<CudaFlaMixer> UploadFlaMixer(CudaContext& context, const AttentionState& state,
                                            absl::string_view where, int64_t* bytes);

// The layer between its projections, enqueued on the context's stream:
//   rows.q: the fused projection rows (q_stride floats apart, projection_width used), exactly
//     the CPU layer's layout: gla q|k|v|[g]|gk0, retnet q|k|v|[g], hgrn2 q|f|i, gsa q|k|v|f;
//   rows.out: the attended rows (attended_width floats each, out_stride apart);
//   rows.states / sequences / first / count / longest_run / checkpoints as in StepRows (decode:
//     one row per sequence with states[b]; scan: rows.first set, sequence s owns rows first[s]
//     .. + count[s] and states[s]; a null state is a padding row (or run) whose output is 0 and
//     whose state is not touched; checkpoints[row], when set, receives the state block as it is
//     after that row); rows.kv is not read;
//   positions[row]: the row's position (device int64; read by retnet's RoPE only, may be null
//     for the other types);
//   prepared: device scratch of rows.batch * prepared_width floats (overwritten).
// The result equals the CPU layer's PrepareRows + Scan + FinishRows within fp32 tolerance, and
// the state blocks are updated in the CPU layout. May use the context's workspace (split
// partials); must not grow it during a CUDA graph capture (run the shapes once eagerly first).
absl::Status FlaMixerForward(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                             const int64_t* positions, float* prepared);

// fla's short convolution (short_conv.h) around a mixer on the device: the window of the last
// W - 1 inputs stays where the CPU keeps it, after the inner state's floats.
struct CudaShortConv {
  fla::ConvParams params;  // its pointers point into the arrays below
  DeviceArray<float> weight, bias;
  int64_t width = 0;  // floats of a convolved row (the inner mixer's projection width)
};

// The device copy of a ShortConvState's convolution; `inner_projection_width`: the inner
// mixer's projection width (>= channels). InvalidArgument naming `where` for bad shapes.
absl::StatusOr<CudaShortConv> UploadShortConv(CudaContext& context, const AttentionState& state,
                                              int64_t inner_projection_width,
                                              absl::string_view where, int64_t* bytes);

// The convolved rows of `rows` (rows.q, rows.q_stride apart) into `convolved` (conv.width floats
// apart): the first C columns convolved with the taps before each row (earlier rows of its run,
// then the sequence's window; zeros for a padding row), the rest copied. Reads the windows only.
absl::Status ShortConvRows(CudaContext& context, const CudaShortConv& conv, const StepRows& rows,
                           float* convolved);

// After the inner mixer has run over `rows`: each sequence's window moves on past its rows (the
// raw inputs in rows.q), and every set rows.checkpoints[b] receives the window after row b.
absl::Status ShortConvAdvance(CudaContext& context, const CudaShortConv& conv,
                              const StepRows& rows);

// gated_deltanet's device parameters (immutable after upload).
struct CudaGatedDelta {
  fla::DeltaParams params;  // its pointers point into the arrays below
  DeviceArray<float> minus_a, dt_bias, norm_weight;
  int64_t state_floats = 0;  // H K V
};

// The device copy of a GatedDeltaState (UNIMPLEMENTED naming `where` for any other state).
absl::StatusOr<CudaGatedDelta> UploadGatedDelta(CudaContext& context, const AttentionState& state,
                                                absl::string_view where, int64_t* bytes);

// The gated delta rule between the projections, as FlaMixerForward (same rows, states,
// checkpoints and padding contract): prepare (silu, L2 norms, decay, beta), the step (per
// value head, 32-column tile and sequence, S [K, V] in global memory, two passes a row: S^T k,
// then the update and the read), finish (o_norm per head, silu gate). `prepared`: scratch of
// rows.batch * PreparedWidth() floats.
absl::Status GatedDeltaForward(CudaContext& context, const CudaGatedDelta& delta,
                               const StepRows& rows, float* prepared);

namespace internal {

// A gated delta step's launch: blocks (heads x tiles, sequences) of kFlaStepThreads threads, a
// tile 32 value columns wide, the 4 warps over interleaved key rows.
struct GatedDeltaPlan {
  int tiles = 1;
  size_t shared_bytes = 0;  // q, k [K] | the warps' sums [4, 32]
};
absl::StatusOr<GatedDeltaPlan> PlanGatedDeltaStep(const fla::DeltaParams& p, int64_t sequences);

inline constexpr int kFlaStepThreads = 128;  // threads of a step block (4 warps)
// The most split partials (bytes of the context's workspace) a gated linear step writes; a long
// prefill chunk gets fewer splits rather than more scratch.
inline constexpr int64_t kFlaMaxPartialBytes = int64_t{64} << 20;

// A gated linear step's launch: blocks (heads x tiles, sequences, split.splits), each over
// split.chunk key rows of a tile of 32 x vec value columns.
struct GatedLinearPlan {
  int vec = 1;    // value columns a lane owns (4: float4 state access, when V % 4 == 0)
  int tiles = 1;  // column tiles per head
  SplitPlan split;
  size_t shared_bytes = 0;
  int64_t partial_floats = 0;  // workspace floats of the split partials (0: unsplit)
};
// `longest_run`: the scan form's longest run, 1 for a decode step.
absl::StatusOr<GatedLinearPlan> PlanGatedLinearStep(const fla::Params& p, int64_t batch,
                                                    int64_t sequences, int64_t longest_run,
                                                    int sm_count);

// A gsa step's launch: blocks (heads, sequences, split.splits) over split.chunk slots each.
struct GsaPlan {
  int vec = 1;           // 4 when K % 4 == 0 and V % 4 == 0
  int value_span = 1;    // threads sharing a V~ row's columns (<= kFlaStepThreads)
  int value_groups = 1;  // groups of value_span threads over the slots
  SplitPlan split;
  size_t shared_bytes = 0;
  int64_t partial_floats = 0;  // workspace floats of the softmax partials (0: unsplit)
};
absl::StatusOr<GsaPlan> PlanGsaStep(const fla::Params& p, int64_t batch, int64_t sequences,
                                    int64_t longest_run, int sm_count);

// The step kernels' launches (gated_linear_state_cuda.cu, gsa_state_cuda.cu): fold the
// prepared rows (`prepared`, prepared_width apart) into the states and read them. Each writes
// either the attended rows' unnormalised reads to rows.out (*splits = 1) or `*splits` partial
// rows per row into `*partials` (the context's workspace, layout the finish kernel's).
absl::Status GatedLinearStep(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                             const float* prepared, const float** partials, int* splits);
absl::Status GsaStep(CudaContext& context, const CudaFlaMixer& mixer, const StepRows& rows,
                     const float* prepared);

}  // namespace internal
}  // namespace abcd::cuda
