#include "engine/attention/attention_layer.h"

#include <algorithm>
#include <cmath>

#include "absl/container/inlined_vector.h"
#include "engine/core/status_macros.h"
#include "engine/ops/matmul.h"

namespace abcd {
std::unique_ptr<AttentionLayer> AttentionLayer::FromParts(Parts parts) {
  std::unique_ptr<AttentionLayer> layer(new AttentionLayer());
  layer->spec_ = std::move(parts.spec);
  layer->d_model_ = parts.d_model;
  layer->state_ = std::move(parts.state);
  layer->fused_ = std::move(parts.fused);
  layer->query_ = std::move(parts.query);
  layer->out_ = std::move(parts.out);
  layer->fused_bias_ = std::move(parts.fused_bias);
  layer->query_bias_ = std::move(parts.query_bias);
  layer->out_bias_ = std::move(parts.out_bias);
  layer->layout_ = parts.layout;
  layer->attended_width_ = parts.attended_width;
  layer->state_weight_bytes_ = parts.state_weight_bytes;
  return layer;
}

int64_t AttentionLayer::projection_macs_per_token() const {
  const int64_t attention_out = out_.out() * out_.in();
  if (!query_.empty()) return query_.out() * query_.in() + attention_out;
  return fused_.out() * fused_.in() + attention_out;
}

int64_t AttentionLayer::weight_bytes() const {
  const size_t biases = fused_bias_.size() + query_bias_.size() + out_bias_.size();
  return fused_.bytes() + query_.bytes() + out_.bytes() + static_cast<int64_t>(4 * biases) +
         state_weight_bytes_;
}

KeyValueRow AttentionLayer::KeyValueAt(const float* projection_row, int64_t k_offset) const {
  // k_offset: where k starts (layout_.k for self attention, 0 for a cross memory's [k; v; extra]).
  const int64_t shift = k_offset - layout_.k;
  return {projection_row + k_offset, projection_row + layout_.v + shift,
          projection_row + layout_.extra + shift};
}

const float* AttentionLayer::KernelRows(CpuContext& ctx, const float* projection, int64_t rows,
                                        std::span<const StateRef> states, int64_t* width) const {
  const int64_t prepared_width = state_->PreparedWidth();
  if (prepared_width == 0) {
    *width = fused_.out();
    return projection;
  }
  float* prepared = ctx.Buffer(Scratch::kPrepared, rows * prepared_width);
  state_->PrepareRows(ctx, projection, fused_.out(), rows, states, prepared);
  *width = prepared_width;
  return prepared;
}

namespace {

using Run = RowRun;

absl::InlinedVector<Run, 64> SplitRuns(std::span<const StateRef> states) {
  absl::InlinedVector<Run, 64> runs;
  for (int64_t r = 0; r < static_cast<int64_t>(states.size()); ++r) {
    const StateRef& s = states[static_cast<size_t>(r)];
    if (!runs.empty()) {
      const StateRef& prev = states[static_cast<size_t>(runs.back().first)];
      if (prev.fixed == s.fixed && prev.kv == s.kv) {
        ++runs.back().count;
        continue;
      }
    }
    runs.push_back({r, 1});
  }
  return runs;
}

// Scans `runs` with `scan` (one call per phase) so that rows with a checkpoint have their
// state (`floats` floats) copied once every head has folded them in.
template <typename Scan>
void ScanWithCheckpoints(std::span<const Run> runs, std::span<const StateRef> states,
                         int64_t fixed_floats, const Scan& scan) {
  // Every head must have folded a checkpoint's row before its state is copied, so runs are cut
  // after each checkpoint row and scanned in phases: phase p scans every run's p-th segment,
  // then copies the states of the segments that end at a checkpoint. A run without checkpoints
  // is one segment, scanned in the first phase.
  std::vector<std::vector<Run>> phases;
  for (const Run& run : runs) {
    size_t phase = 0;
    int64_t first = run.first;
    const int64_t end = run.first + run.count;
    for (int64_t r = run.first; r < end; ++r) {
      if (states[static_cast<size_t>(r)].checkpoint == nullptr && r + 1 < end) continue;
      if (phases.size() <= phase) phases.emplace_back();
      phases[phase++].push_back({first, r + 1 - first});
      first = r + 1;
    }
  }
  const size_t floats = static_cast<size_t>(fixed_floats);
  for (const std::vector<Run>& segments : phases) {
    scan(segments);
    for (const Run& segment : segments) {
      const StateRef& last = states[static_cast<size_t>(segment.first + segment.count - 1)];
      if (last.checkpoint != nullptr) std::copy_n(last.fixed, floats, last.checkpoint);
    }
  }
}

}  // namespace

void AttentionLayer::ForwardCausal(CpuContext& ctx, const float* x, int64_t rows,
                                   std::span<const StateRef> states, float* out) const {
  const int64_t attended_width = attended_width_;
  float* projection = ctx.Buffer(Scratch::kProjection, rows * fused_.out());
  float* attended = ctx.Buffer(Scratch::kAttended, rows * attended_width);
  cpu::Linear(x, rows, fused_, fused_bias_or_null(), projection, ctx);
  int64_t width = 0;
  const float* kernel_rows = KernelRows(ctx, projection, rows, states, &width);
  const absl::InlinedVector<Run, 64> runs = SplitRuns(states);
  if (state_->UsesKvCache()) {
    // The cache covers the step's rows before any head writes its part of them.
    for (const Run& run : runs) {
      const StateRef& last = states[static_cast<size_t>(run.first + run.count - 1)];
      last.kv->length = std::max(last.kv->length, last.position + 1);
    }
  }
  const int heads = state_->heads();
  const bool checkpoints = state_->FixedFloats() > 0 &&
                           std::any_of(states.begin(), states.end(),
                                       [](const StateRef& s) { return s.checkpoint != nullptr; });
  // Types whose heads own contiguous state ranges copy a checkpoint head by head in the scan.
  const bool copy_heads = checkpoints && state_->HeadStateRange(0).second > 0;
  // The scan of `segments` (runs or parts of runs), one task per (segment, head).
  const auto scan = [&](std::span<const Run> segments) {
    ctx.pool().ParallelFor(static_cast<int64_t>(segments.size()) * heads, [&](int64_t task) {
      const Run& run = segments[static_cast<size_t>(task / heads)];
      const int h = static_cast<int>(task % heads);
      for (int64_t r = run.first; r < run.first + run.count; ++r) {
        const StateRef& state = states[static_cast<size_t>(r)];
        const float* row = kernel_rows + r * width;
        state_->UpdateHead(h, KeyValueAt(row, layout_.k), state);
        state_->ReadHead(h, row, state, attended + r * attended_width);
        if (copy_heads && state.checkpoint != nullptr) {
          const auto [offset, floats] = state_->HeadStateRange(h);
          std::copy_n(state.fixed + offset, floats, state.checkpoint + offset);
        }
      }
    });
  };
  if (!checkpoints) {
    state_->Scan(ctx, {kernel_rows, width, layout_, states, runs, attended, attended_width,
                       ctx.linear_products()});
  } else if (copy_heads) {
    scan(runs);
  } else {
    ScanWithCheckpoints(runs, states, state_->FixedFloats(), scan);
  }
  state_->FinishRows(ctx, kernel_rows, rows, attended);
  cpu::Linear(attended, rows, out_, out_bias_or_null(), out, ctx);
}

void AttentionLayer::ForwardBidirectional(CpuContext& ctx, const float* x, int64_t rows,
                                          float* out) const {
  const int64_t d = d_model_;
  const int64_t width = static_cast<int64_t>(fused_bias_.size());
  float* projection = ctx.Buffer(Scratch::kProjection, rows * width);
  float* attended = ctx.Buffer(Scratch::kAttended, rows * d);
  cpu::Linear(x, rows, fused_, fused_bias_.data(), projection, ctx);
  // A temporary state for this source only: every key is folded in before any query reads.
  std::vector<float> fixed(state_->FixedFloats());
  state_->Init(fixed.data());
  KvCache kv;
  if (state_->UsesKvCache()) {
    kv.width = d;
    kv.length = rows;
    kv.Resize(rows);
  }
  KvCache* cache = state_->UsesKvCache() ? &kv : nullptr;
  const int heads = state_->heads();
  ctx.pool().ParallelFor(heads, [&](int64_t task) {
    const int h = static_cast<int>(task);
    for (int64_t r = 0; r < rows; ++r) {
      state_->UpdateHead(h, KeyValueAt(projection + r * width, layout_.k),
                         {fixed.data(), cache, r});
    }
    // Every row sees the whole source (the window ring sees its last `window` rows).
    const StateRef all{fixed.data(), cache, rows - 1};
    for (int64_t r = 0; r < rows; ++r) {
      state_->ReadHead(h, projection + r * width, all, attended + r * d);
    }
  });
  cpu::Linear(attended, rows, out_, out_bias_.data(), out, ctx);
}

void AttentionLayer::BuildMemory(CpuContext& ctx, const float* source, int64_t rows,
                                 const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(fused_bias_.size());
  float* projection = ctx.Buffer(Scratch::kProjection, rows * width);
  cpu::Linear(source, rows, fused_, fused_bias_.data(), projection, ctx);
  if (state.kv != nullptr) state.kv->length = std::max(state.kv->length, rows);
  const int heads = state_->heads();
  ctx.pool().ParallelFor(heads, [&](int64_t task) {
    StateRef row_state = state;
    for (int64_t r = 0; r < rows; ++r) {
      row_state.position = r;
      state_->UpdateHead(static_cast<int>(task), KeyValueAt(projection + r * width, 0), row_state);
    }
  });
}

void AttentionLayer::ForwardCross(CpuContext& ctx, const float* x, int64_t rows,
                                  std::span<const StateRef> states, float* out) const {
  const int64_t d = d_model_;
  float* queries = ctx.Buffer(Scratch::kProjection, rows * d);
  float* attended = ctx.Buffer(Scratch::kAttended, rows * d);
  cpu::Linear(x, rows, query_, query_bias_.data(), queries, ctx);
  const int heads = state_->heads();
  ctx.pool().ParallelFor(rows * heads, [&](int64_t task) {
    const int64_t r = task / heads;
    StateRef all = states[static_cast<size_t>(r)];
    all.position = StateRef::kSeesAll;
    state_->ReadHead(static_cast<int>(task % heads), queries + r * d, all, attended + r * d);
  });
  cpu::Linear(attended, rows, out_, out_bias_.data(), out, ctx);
}

}  // namespace abcd
