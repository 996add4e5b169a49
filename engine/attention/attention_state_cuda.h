// Decode-step kernels of the attention types on the device (the CUDA twins of AbcState,
// LinearState and SoftmaxState): ONE launch per layer per step for the whole running batch.
// Each kernel reads a sequence's state once, folds the new token in, writes it back and reads
// the attention output in the same pass. When batch x heads is too small to fill the GPU, the
// slots (abc), features (rfa/t2r/elu) or cached tokens (softmax) of a head are split across
// blocks and the partial results combined by a second small kernel (flash-decoding style).
//
// State layouts are exactly the CPU ones (abc_state.h, linear_state.h), so a state block can
// be copied between backends. Every pointer here is a device pointer. The rows of one call must
// belong to different sequences.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/device/cuda_context.h"

namespace abcd::cuda {

// Where one step's rows live. Row b reads its query at q + b * q_stride and its key, value and
// type-specific extra columns at kv + b * kv_stride (k = [0, d), v = [d, 2d), extra from 2d:
// the layout of the fused projection) and writes out + b * out_stride. Decode: one row per
// sequence, row b owns states[b] (the address of its state block for this layer; 16-byte
// aligned). Prefill (scan): sequence s owns rows first[s] .. first[s] + count[s] - 1, in
// order, and states[s]; the kernel folds them in one after the other, each row reading the
// state that includes itself, exactly as that many decode steps would.
struct StepRows {
  int64_t batch = 0;  // rows
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* kv = nullptr;
  int64_t kv_stride = 0;
  float* const* states = nullptr;  // [batch], or [sequences] for a prefill; a null entry
                                   // (abc, rfa/t2r/elu) is a padding row: output 0, no state
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t sequences = 0;           // prefill only: number of sequences
  const int32_t* first = nullptr;  // prefill only: [sequences] first row of each sequence
  const int32_t* count = nullptr;  // prefill only: [sequences] rows of each sequence
  int64_t longest_run = 1;         // prefill only: the largest count (host copy): a long scan
                                   // is split across blocks like a lone sequence would be
  // Speculative decoding (bounded types): [batch] or null. A non-null checkpoints[b] receives a
  // copy of this layer's state block as it is after row b (the block's layout; 16-byte
  // aligned), written before the next row changes it.
  float* const* checkpoints = nullptr;
};

// Copies the `floats`-long `empty_state` (an Init()ed block) into each of `batch` states.
absl::Status FillStates(CudaContext& context, float* const* states, int64_t batch,
                        const float* empty_state, int64_t floats);

// ---- abc: per head K~ [n, dh], V~ [n, dh], L [n] (abc_state.h); extra = H*n control logits.
struct AbcShape {
  int n_heads = 0;
  int head_dim = 0;
  int slots = 0;
};
// update = true: self attention (fold k/v in with the control weights, then read);
// update = false: read only (cross attention over a memory built by the encoder).
absl::Status AbcStep(CudaContext& context, const AbcShape& shape, const StepRows& rows,
                     bool update);

// ---- rfa / t2r / elu: per head S [F, dh] then z [F] (linear_state.h).
enum class FeatureMapKind { kRfaGaussian, kRfaArccos, kT2r, kElu };
struct LinearAttentionParams {
  int n_heads = 0;
  int head_dim = 0;
  FeatureMapKind kind = FeatureMapKind::kElu;
  int random_features = 0;            // rfa: D (F = 2D gaussian, D arccos)
  int learned_features = 0;           // t2r: r (F = r)
  const float* projection = nullptr;  // rfa: sigma-scaled W [H, D, dh]; t2r: W [H, r, dh]
  const float* bias = nullptr;        // t2r: b [H, r]
  bool gated = false;                 // rfa gate: the first H extra columns are gate logits
  float eps = 0.0f;                   // denominator guard
  int Features() const;
};
absl::Status LinearAttentionStep(CudaContext& context, const LinearAttentionParams& params,
                                 const StepRows& rows);

// ---- softmax with a KV cache (the fair baseline): row b appends its key/value at
// lengths[b] of keys[b] / values[b] ([capacity, kv_heads * head_dim] each, capacity >
// lengths[b]; the value right after the key in the row, at kv + kv_heads * head_dim) and
// attends over lengths[b] + 1 rows with a split-K kernel; GQA: query head h reads key/value
// head h / (n_heads / kv_heads) (abcd's own layers: kv_heads = n_heads). The caller advances its
// lengths. All appends land before any row attends, so a prefill is T rows sharing one cache with
// lengths start, start + 1, ... (causal by construction; rows.first/count are not used).
struct KvCacheRows {
  float* const* keys = nullptr;      // [batch]; a null entry is a padding row: output 0
  float* const* values = nullptr;    // [batch]
  const int32_t* lengths = nullptr;  // [batch], before this step's token
  int32_t max_length = 0;  // host-side bound on lengths (sizes the grid; a CUDA graph captures
                           // it, so any larger bound is valid too: extra chunks are empty)
};
absl::Status SoftmaxStep(CudaContext& context, int n_heads, int kv_heads, int head_dim,
                         const StepRows& rows, const KvCacheRows& cache);

// ---- sliding window (WindowState with dilation 1; Mistral / Qwen sliding windows): per sequence
// a ring of the last `window` keys [window, kv_heads * head_dim] then values (same shape), the
// CPU layout; the row at position p goes to ring row p % window, then attends over the
// min(p + 1, window) rows kept (update, then read). Row b's key at rows.kv + b * kv_stride, its
// value right after it (kv_heads * head_dim floats each); `positions` [rows] each row's position
// in its sequence (device). Decode and scan (rows.first) forms, padding rows
// (null states) and checkpoints as the abc step's; GQA as SoftmaxStep's (a block serves a query
// group, reading the ring once).
struct WindowShape {
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int window = 0;
};
absl::Status WindowStep(CudaContext& context, const WindowShape& shape, const StepRows& rows,
                        const int64_t* positions);

// Hugging Face softmax layers' kernel rows, in place over `batch` rows of `stride` floats
// (q [q_heads * head_dim] at column 0, then k [kv_heads * head_dim]): each q and k head
// RMS-normalised times q_norm / k_norm (Qwen3; both null: none), then turned by RoPE at
// positions[row] with head_dim / 2 inverse frequencies (null: none) -- SoftmaxState::PrepareRows.
absl::Status PrepareRotaryRows(CudaContext& context, float* rows, int64_t stride, int64_t batch,
                               int q_heads, int kv_heads, int head_dim, const int64_t* positions,
                               const float* inv_freq, const float* q_norm, const float* k_norm,
                               float eps);

}  // namespace abcd::cuda
