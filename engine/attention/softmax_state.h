// Softmax attention over a growing KvCache: the baseline whose memory grows with every token.
// Used causally (decoder), bidirectionally (encoder: all rows appended before any read) and for
// cross attention (the cache holds the projected encoder outputs).
#pragma once

#include <utility>
#include <vector>

#include "engine/attention/attention_state.h"
#include "engine/attention/softmax_read.h"

namespace abcd {

// Runs of a causal step with at least this many rows (prompt chunks) are read in blocks as
// matrix products; shorter runs and speculative decoding's verify runs (StateRef::verify) row by
// row, so speculation computes every row exactly as plain decoding does. From 8 rows on a block
// read is as fast or faster at 2k-32k cached rows (`abcd-bench prefill_chunk --chunk N`, fp32
// products: 8 rows 1.1-3.6x, 0.9-2.2x at 8k; 24 rows 1.9-10x; bf16 products 2-7x from 4 rows).
inline constexpr int64_t kSoftmaxBlockedRunRows = 8;

//
// Grouped-query attention (Llama's num_key_value_heads): the cache holds kv_heads heads; query
// head j reads key/value head j / (q_heads / kv_heads), and one task (a "head" of the
// interface) serves a whole group, reading its keys and values once for all of its queries.
// With RoPE (Llama) the kernel rows are prepared: q and k turned by the row's position
// (half-split) in a copy of the projection row. With per-head q/k norms (Qwen3's q_norm / k_norm)
// each q and k head is RMS-normalised (times its weight) before it is turned.
class SoftmaxState final : public AttentionState {
 public:
  SoftmaxState(int n_heads, int head_dim)
      : q_heads_(n_heads), kv_heads_(n_heads), head_dim_(head_dim) {}
  // GQA and RoPE: `rope_inv_freq` holds head_dim / 2 inverse frequencies (empty: no RoPE).
  SoftmaxState(int q_heads, int kv_heads, int head_dim, std::vector<float> rope_inv_freq)
      : q_heads_(q_heads),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        rope_inv_freq_(std::move(rope_inv_freq)) {}
  // ... and per-head RMSNorms of q and k before RoPE: weights [head_dim] each (q's may carry a
  // folded scale), statistics over the head's head_dim values.
  SoftmaxState(int q_heads, int kv_heads, int head_dim, std::vector<float> rope_inv_freq,
               std::vector<float> q_norm, std::vector<float> k_norm, float norm_eps)
      : q_heads_(q_heads),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        rope_inv_freq_(std::move(rope_inv_freq)),
        q_norm_(std::move(q_norm)),
        k_norm_(std::move(k_norm)),
        norm_eps_(norm_eps) {}
  int64_t FixedFloats() const override { return 0; }
  bool UsesKvCache() const override { return true; }
  void Init(float*) const override {}
  int heads() const override { return kv_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // Decode rows (runs of one row) read every head in one walk over their cache in row order,
  // split into pieces across the pool's threads where the cache is long (flash-decoding:
  // partial reads of disjoint ranges, merged); longer runs (prefill) are read in blocks by
  // ScanHead, one task per (run, key/value head).
  void Scan(CpuContext& ctx, const ScanArgs& args) const override;
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  // Prepared rows (RoPE or GQA): q [q_heads * dh] | k [kv_heads * dh] | v [kv_heads * dh].
  int64_t PreparedWidth() const override;
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t d_model) const override;
  // Values per KvCache row (keys of every kv head).
  int64_t KvWidth() const { return static_cast<int64_t>(kv_heads_) * head_dim_; }
  // What the CUDA twin uploads (attention_cuda_dispatch.cc).
  int q_heads() const { return q_heads_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freq_; }
  const std::vector<float>& q_norm() const { return q_norm_; }
  const std::vector<float>& k_norm() const { return k_norm_; }
  float norm_eps() const { return norm_eps_; }

 private:
  bool prepared() const {
    return !rope_inv_freq_.empty() || kv_heads_ != q_heads_ || !q_norm_.empty();
  }
  // Rows [begin, end) of the cache read by every query head (q: a kernel row), not yet
  // normalised: partial[q_heads], out[q_heads * head_dim].
  void ReadPartial(const float* q, const KvCache& kv, int64_t begin, int64_t end,
                   SoftmaxPartial* partial, float* out) const;

  int q_heads_;
  int kv_heads_;
  int head_dim_;
  std::vector<float> rope_inv_freq_;
  std::vector<float> q_norm_, k_norm_;  // empty: no q/k norms
  float norm_eps_ = 0.0f;
};

// Softmax over `window` tokens t, t - dilation, ..., t - (window - 1) * dilation (dilation 1: the
// last `window`), kept in a fixed ring of the last (window - 1) * dilation + 1 keys and values
// (tokens of the other residues are read by later queries).
class WindowState final : public AttentionState {
 public:
  WindowState(int n_heads, int head_dim, int window, int dilation = 1)
      : q_heads_(n_heads),
        n_heads_(n_heads),
        head_dim_(head_dim),
        window_(window),
        dilation_(dilation),
        span_(int64_t{window - 1} * dilation + 1) {}
  // Hugging Face sliding windows (Mistral, Qwen): the last `window` tokens of `kv_heads`
  // key/value heads (GQA as in SoftmaxState: heads() counts the key/value heads, ReadHead(g) reads
  // for every query head of group g), rows prepared as SoftmaxState's (optional per-head q/k
  // RMSNorms, then RoPE, before the key is kept).
  WindowState(int q_heads, int kv_heads, int head_dim, int window, std::vector<float> rope_inv_freq,
              std::vector<float> q_norm = {}, std::vector<float> k_norm = {}, float norm_eps = 0.0f)
      : q_heads_(q_heads),
        n_heads_(kv_heads),
        head_dim_(head_dim),
        window_(window),
        dilation_(1),
        span_(window),
        rope_inv_freq_(std::move(rope_inv_freq)),
        q_norm_(std::move(q_norm)),
        k_norm_(std::move(k_norm)),
        norm_eps_(norm_eps) {}
  int64_t FixedFloats() const override;
  void Init(float* fixed) const override;
  int heads() const override { return n_heads_; }
  void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const override;
  void ReadHead(int head, const float* q, const StateRef& state, float* out) const override;
  // A run of kSoftmaxBlockedRunRows or more consecutive rows of one sequence (dilation 1, no
  // speculative checkpoints or verify rows) is read in blocks, as softmax's prompt runs are
  // (SoftmaxReadWindowRun over the ring's rows still in view and the run's own); other runs row
  // by row.
  void ScanHead(int head, const ScanArgs& args, const RowRun& run) const override;

  int64_t PreparedWidth() const override;
  KernelRowLayout PreparedLayout() const override;
  void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width, int64_t rows,
                   std::span<const StateRef> states, float* prepared) const override;
  int64_t AttendedWidth(int64_t d_model) const override;
  // What the CUDA twin uploads (attention_cuda_dispatch.cc).
  int q_heads() const { return q_heads_; }
  int kv_heads() const { return n_heads_; }
  int head_dim() const { return head_dim_; }
  int window() const { return window_; }
  int dilation() const { return dilation_; }
  const std::vector<float>& rope_inv_freq() const { return rope_inv_freq_; }
  const std::vector<float>& q_norm() const { return q_norm_; }
  const std::vector<float>& k_norm() const { return k_norm_; }
  float norm_eps() const { return norm_eps_; }

 private:
  bool prepared() const {
    return !rope_inv_freq_.empty() || n_heads_ != q_heads_ || !q_norm_.empty();
  }

  int q_heads_;
  int n_heads_;  // key/value heads (the ring's)
  int head_dim_;
  int window_;
  int dilation_;
  int64_t span_;  // ring rows
  std::vector<float> rope_inv_freq_;
  std::vector<float> q_norm_, k_norm_;  // empty: no q/k norms
  float norm_eps_ = 0.0f;
};

}  // namespace abcd
