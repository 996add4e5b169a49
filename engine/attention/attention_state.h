// The one interface behind every attention type: how a sequence's per-layer state is laid out,
// how one token is folded into it (Update) and how a query reads it (Read).
//
// Bounded types (abc, rfa, t2r, elu, window) keep `FixedFloats()` floats per sequence, the same
// after 1 token or 1M; softmax keeps a KvCache that grows by one row per token. The projections
// (GEMMs over all rows of a step) live in AttentionLayer; these kernels see one row at a time,
// per sequence, which is where the state is touched. Implementations are immutable after
// construction and safe to call from several threads on different states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/attention/attention_spec.h"
#include "engine/ops/cpu_context.h"
#include "engine/state/kv_cache.h"

namespace abcd {

// `heads()` counts the state's independent partitions, each updated and read by one task: the
// query heads, or for GQA softmax the key/value heads (ReadHead(g) then writes the outputs of
// every query head of group g, reading the group's keys once).

// The state one token sees in one layer.
struct StateRef {
  // A read of a KvCache sees rows [0, min(kv->length, position + 1)): cross attention and
  // encoder reads pass kSeesAll.
  static constexpr int64_t kSeesAll = int64_t{1} << 62;

  float* fixed = nullptr;  // bounded state block (FixedFloats() floats), null for softmax
  KvCache* kv = nullptr;   // softmax cache, null for bounded types
  int64_t position = 0;    // index of this token in its sequence (KV row, window ring position)
  // Speculative decoding (AttentionLayer::ForwardCausal only): where to copy the FixedFloats()
  // floats of `fixed` once this row is folded in by every head; null: no copy.
  float* checkpoint = nullptr;
  // Speculative decoding: a row of a verify run (its sequence saves checkpoints in this call).
  // Softmax reads such rows one by one, as it reads a decode row, so that speculation changes
  // no output bit; other prompt runs it may read in blocks.
  bool verify = false;
};

// One token's projected key, value and type-specific extra columns (abc control logits,
// rfa gate logits, gsa forget gates, gla decays), all for every head.
struct KeyValueRow {
  const float* k;
  const float* v;
  const float* extra;
};

// Where a kernel-input row keeps its parts: q at column 0, then k, v and the extra columns at
// these offsets, `width` floats in all.
struct KernelRowLayout {
  int64_t k = 0;
  int64_t v = 0;
  int64_t extra = 0;
  int64_t width = 0;
};

// Rows [first, first + count) of a step that belong to one sequence (consecutive rows, one
// state), in position order.
struct RowRun {
  int64_t first = 0;
  int64_t count = 0;
};

// One causal step's kernel inputs for AttentionState::Scan / ScanHead.
struct ScanArgs {
  const float* rows = nullptr;  // kernel rows (q at column 0), `width` floats apart
  int64_t width = 0;
  KernelRowLayout layout;            // where k, v and the extra columns start in a row
  std::span<const StateRef> states;  // one per row of the step
  std::span<const RowRun> runs;      // the step's rows split by sequence
  float* out = nullptr;              // ReadHead outputs, `out_width` floats per row
  int64_t out_width = 0;
  // The pass's products (CpuContext::linear_products()): with kBf16, softmax prompt runs over a
  // bf16 cache multiply in bf16 too (SoftmaxReadCausalRunBf16Products).
  cpu::LinearProducts products = cpu::LinearProducts::kFloat32;

  KeyValueRow KeyValueOf(int64_t row) const {
    const float* r = rows + row * width;
    return {r + layout.k, r + layout.v, r + layout.extra};
  }
};

class AttentionState {
 public:
  virtual ~AttentionState() = default;

  // Floats of fixed state per sequence (0 for softmax).
  virtual int64_t FixedFloats() const = 0;
  // True for softmax: the state is a KvCache.
  virtual bool UsesKvCache() const { return false; }
  // Number of extra projection columns this type needs after q|k|v (e.g. H*n control logits).
  virtual int64_t ExtraColumns() const { return 0; }
  // Writes the empty state.
  virtual void Init(float* fixed) const = 0;
  // Where head `head`'s part of the fixed state lies ({offset, floats}) when every head owns one
  // contiguous range that only its UpdateHead writes; {0, 0} (the default) otherwise. Lets a
  // speculative checkpoint be copied head by head inside the scan instead of after it.
  virtual std::pair<int64_t, int64_t> HeadStateRange(int head) const { return {0, 0}; }
  virtual int heads() const = 0;

  // Folds one token into head `head`'s part of the state. A KvCache's row `state.position`
  // is written; the caller has already set kv->length to cover it (capacity is reserved by
  // the StatePool). Different heads of one state may be updated and read concurrently.
  virtual void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const = 0;
  // out[head's dh columns] = attention of query q (the whole row, already scaled by 1/sqrt(dh))
  // over head `head` of the state.
  virtual void ReadHead(int head, const float* q, const StateRef& state, float* out) const = 0;

  // A causal step without speculative checkpoints: every run's rows folded in and read, in
  // position order, as UpdateHead then ReadHead row by row. The default is one pool task per
  // (run, head) calling ScanHead; softmax overrides it to split long caches across threads.
  virtual void Scan(CpuContext& ctx, const ScanArgs& args) const;
  // Run `run` of head `head`: UpdateHead then ReadHead for each of its rows (the default). Types
  // with a faster equivalent over many rows (blocked softmax, chunked forms) override it; their
  // reads equal the row-by-row ones within float tolerance, and the state after the run is the
  // same.
  virtual void ScanHead(int head, const ScanArgs& args, const RowRun& run) const;

  // Types whose kernel inputs are more than the fused projection's rows (feature maps, RoPE at
  // each row's position, forget gates, GQA-shaped rows) prepare them: PreparedWidth() > 0 floats
  // per row laid out as PreparedLayout(), written by PrepareRows from the projection rows
  // (`projection_width` floats each; states[r].position is row r's position) before any
  // UpdateHead or ReadHead of the step. 0 (the default): the kernels read the projection rows,
  // q|k|v|extra of d_model columns each.
  virtual int64_t PreparedWidth() const { return 0; }
  virtual KernelRowLayout PreparedLayout() const { return {}; }
  virtual void PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                           int64_t rows, std::span<const StateRef> states, float* prepared) const {}
  // Width of a row of ReadHead outputs (all heads): d_model unless the type says otherwise.
  virtual int64_t AttendedWidth(int64_t d_model) const { return d_model; }
  // The read rows (`rows` x AttendedWidth) before the output projection: output norms and gates
  // of the fla mixers, which read the prepared rows (gates) too. Default: nothing.
  virtual void FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                          float* attended) const {}

  // Every head, in order (single-threaded callers).
  void Update(const KeyValueRow& row, const StateRef& state) const {
    for (int h = 0; h < heads(); ++h) UpdateHead(h, row, state);
  }
  void Read(const float* q, const StateRef& state, float* out) const {
    for (int h = 0; h < heads(); ++h) ReadHead(h, q, state, out);
  }
};

}  // namespace abcd
