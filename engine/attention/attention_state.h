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
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model_config.h"
#include "engine/state/kv_cache.h"

namespace abcd {

class WeightLoader;

// The state one token sees in one layer.
struct StateRef {
  // A read of a KvCache sees rows [0, min(kv->length, position + 1)): cross attention and
  // encoder reads pass kSeesAll.
  static constexpr int64_t kSeesAll = int64_t{1} << 62;

  float* fixed = nullptr;  // bounded state block (FixedFloats() floats), null for softmax
  KvCache* kv = nullptr;   // softmax cache, null for bounded types
  int64_t position = 0;    // index of this token in its sequence (KV row, window ring position)
};

// One token's projected key, value and type-specific extra columns (abc control logits,
// rfa gate logits), all for every head.
struct KeyValueRow {
  const float* k;
  const float* v;
  const float* extra;
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
  virtual int heads() const = 0;

  // Folds one token into head `head`'s part of the state. A KvCache's row `state.position`
  // is written; the caller has already set kv->length to cover it (capacity is reserved by
  // the StatePool). Different heads of one state may be updated and read concurrently.
  virtual void UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const = 0;
  // out[head's dh columns] = attention of query q (the whole row, already scaled by 1/sqrt(dh))
  // over head `head` of the state.
  virtual void ReadHead(int head, const float* q, const StateRef& state, float* out) const = 0;

  // Every head, in order (single-threaded callers).
  void Update(const KeyValueRow& row, const StateRef& state) const {
    for (int h = 0; h < heads(); ++h) UpdateHead(h, row, state);
  }
  void Read(const float* q, const StateRef& state, float* out) const {
    for (int h = 0; h < heads(); ++h) ReadHead(h, q, state, out);
  }
};

// The abc position (Linformer) table an attention with tensor prefix `prefix` reads:
// "encoder.linformer.weight" (encoder self), "decoder.cross_linformer.weight" (cross, prefix
// "decoder.layers.i.cross") or "decoder.linformer.weight" (decoder self).
std::string LinformerTableName(absl::string_view prefix);

// Builds the kernel for `spec`; `prefix` names the attention's tensors (e.g.
// "decoder.layers.0.attn") for the types that own weights (rfa, t2r).
absl::StatusOr<std::unique_ptr<AttentionState>> MakeAttentionState(const ModelConfig& config,
                                                                   const AttentionSpec& spec,
                                                                   const std::string& prefix,
                                                                   WeightLoader& weights);

}  // namespace abcd
