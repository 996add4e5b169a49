#include "engine/attention/softmax_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/matmul.h"

namespace abcd {
namespace {

// A read of more than kPieceRows cached rows is split at multiples of kPieceRows and merged:
// the same pieces whatever the batch, the thread count or the path (a decode row in Scan, a
// short run row by row in ReadHead), so a row's read is the same bits on every path.
constexpr int64_t kPieceRows = 1024;

// Calls read(keys, values) with the cache's rows from column `column` on, as their stored type:
// float, bf16 (uint16_t) or F16.
template <typename Read>
void WithRows(const KvCache& kv, int64_t column, Read&& read) {
  switch (kv.format) {
    case KvFormat::kF32:
      read(kv.keys.data() + column, kv.values.data() + column);
      return;
    case KvFormat::kBf16:
      read(kv.keys16.data() + column, kv.values16.data() + column);
      return;
    case KvFormat::kF16:
      read(reinterpret_cast<const F16*>(kv.keys16.data()) + column,
           reinterpret_cast<const F16*>(kv.values16.data()) + column);
      return;
  }
}

}  // namespace

void SoftmaxState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  state.kv->Write(state.position, offset, row.k + offset, row.v + offset, head_dim_);
}

void SoftmaxState::ReadHead(int g, const float* q, const StateRef& state, float* out) const {
  const KvCache& kv = *state.kv;
  const int64_t kv_offset = static_cast<int64_t>(g) * head_dim_;
  const int64_t count = std::min(kv.length, state.position + 1);
  const int group = q_heads_ / kv_heads_;
  const int64_t offset = static_cast<int64_t>(g) * group * head_dim_;
  if (count == 0) {
    std::fill_n(out + offset, int64_t{group} * head_dim_, 0.0f);
    return;
  }
  // The pieces of kPieceRows rows Scan reads a decode row in, merged the same way.
  const int64_t pieces = (count + kPieceRows - 1) / kPieceRows;
  const int64_t width = int64_t{group} * head_dim_;
  absl::InlinedVector<SoftmaxPartial, 16> partials(static_cast<size_t>(pieces * group));
  absl::InlinedVector<float, 1024> outs(static_cast<size_t>(pieces * width));
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = p * kPieceRows, end = std::min(count, begin + kPieceRows);
    SoftmaxPartial* partial = partials.data() + p * group;
    float* piece_out = outs.data() + p * width;
    WithRows(kv, kv_offset, [&](const auto* keys, const auto* values) {
      SoftmaxReadPartial(q + offset, 1, group, keys, values, begin, end, kv.width, head_dim_,
                         partial, piece_out);
    });
  }
  for (int j = 0; j < group; ++j) {
    SoftmaxMerge(partials.data() + j, group, outs.data() + int64_t{j} * head_dim_, width,
                 static_cast<int>(pieces), head_dim_, out + offset + int64_t{j} * head_dim_);
  }
}

namespace {

// One task of SoftmaxState::Scan: a whole run of one head (ScanHead; end == 0), or rows
// [begin, end) of a decode row's cache for every head, its partial reads at `slot` (-1: the
// piece is the row's whole read, merged into the output by the task itself).
struct ReadTask {
  int64_t run = 0;
  int head = 0;
  int64_t begin = 0, end = 0;
  int64_t slot = 0;
};

}  // namespace

void SoftmaxState::ReadPartial(const float* q, const KvCache& kv, int64_t begin, int64_t end,
                               SoftmaxPartial* partial, float* out) const {
  const int group = q_heads_ / kv_heads_;
  WithRows(kv, 0, [&](const auto* keys, const auto* values) {
    SoftmaxReadPartial(q, kv_heads_, group, keys, values, begin, end, kv.width, head_dim_, partial,
                       out);
  });
}

void SoftmaxState::Scan(CpuContext& ctx, const ScanArgs& args) const {
  const auto rows_read = [&](const RowRun& run) {
    const StateRef& s = args.states[static_cast<size_t>(run.first)];
    return std::min(s.kv->length, s.position + 1);
  };
  int64_t decode_rows = 0;  // cached rows the step's decode rows read
  for (const RowRun& run : args.runs) {
    if (run.count == 1) decode_rows += rows_read(run);
  }
  if (decode_rows == 0) {
    AttentionState::Scan(ctx, args);
    return;
  }
  // Decode rows read every head in one walk over their cache, in pieces of kPieceRows rows
  // (tasks for the pool's threads, merged after; a read of one piece is merged by its task).
  std::vector<ReadTask> tasks;
  int64_t slots = 0;
  for (size_t i = 0; i < args.runs.size(); ++i) {
    const RowRun& run = args.runs[i];
    const int64_t index = static_cast<int64_t>(i);
    if (run.count > 1) {
      for (int h = 0; h < kv_heads_; ++h) tasks.push_back({index, h});
      continue;
    }
    // The row's key and value are written before any piece reads them.
    for (int h = 0; h < kv_heads_; ++h) {
      UpdateHead(h, args.KeyValueOf(run.first), args.states[static_cast<size_t>(run.first)]);
    }
    const int64_t count = rows_read(run);
    if (count > 0 && count <= kPieceRows) {
      tasks.push_back({index, 0, 0, count, -1});
      continue;
    }
    for (int64_t begin = 0; begin < count; begin += kPieceRows) {
      tasks.push_back({index, 0, begin, std::min(count, begin + kPieceRows), slots++});
    }
  }
  const int64_t width = int64_t{q_heads_} * head_dim_;
  std::vector<SoftmaxPartial> partials(static_cast<size_t>(slots * q_heads_));
  std::vector<float> outs(static_cast<size_t>(slots * width));
  ctx.pool().ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const ReadTask& task = tasks[static_cast<size_t>(t)];
    const RowRun& run = args.runs[static_cast<size_t>(task.run)];
    if (task.end == 0) {
      ScanHead(task.head, args, run);
      return;
    }
    const StateRef& state = args.states[static_cast<size_t>(run.first)];
    const float* q = args.rows + run.first * args.width;
    if (task.slot >= 0) {
      ReadPartial(q, *state.kv, task.begin, task.end, partials.data() + task.slot * q_heads_,
                  outs.data() + task.slot * width);
      return;
    }
    // The whole read in one piece: merged here, as the loop below merges a row's pieces.
    absl::InlinedVector<SoftmaxPartial, 64> piece_partials(static_cast<size_t>(q_heads_));
    absl::InlinedVector<float, 4096> piece_out(static_cast<size_t>(width));
    ReadPartial(q, *state.kv, task.begin, task.end, piece_partials.data(), piece_out.data());
    float* out = args.out + run.first * args.out_width;
    for (int j = 0; j < q_heads_; ++j) {
      SoftmaxMerge(piece_partials.data() + j, q_heads_, piece_out.data() + int64_t{j} * head_dim_,
                   width, 1, head_dim_, out + int64_t{j} * head_dim_);
    }
  });
  // Merge the pieces of each decode row read in several (consecutive tasks and slots),
  // normalising its read.
  for (size_t t = 0; t < tasks.size();) {
    const ReadTask& first = tasks[t];
    size_t end = t + 1;
    if (first.end == 0 || first.slot < 0) {
      t = end;
      continue;
    }
    while (end < tasks.size() && tasks[end].run == first.run) ++end;
    float* out = args.out + args.runs[static_cast<size_t>(first.run)].first * args.out_width;
    for (int j = 0; j < q_heads_; ++j) {
      SoftmaxMerge(partials.data() + first.slot * q_heads_ + j, q_heads_,
                   outs.data() + first.slot * width + int64_t{j} * head_dim_, width,
                   static_cast<int>(end - t), head_dim_, out + int64_t{j} * head_dim_);
    }
    t = end;
  }
}

void SoftmaxState::ScanHead(int g, const ScanArgs& args, const RowRun& run) const {
  const StateRef& first = args.states[static_cast<size_t>(run.first)];
  bool consecutive = first.kv->length >= first.position + run.count;
  for (int64_t i = 1; consecutive && i < run.count; ++i) {
    const StateRef& s = args.states[static_cast<size_t>(run.first + i)];
    consecutive = s.kv == first.kv && s.position == first.position + i;
  }
  if (run.count < kSoftmaxBlockedRunRows || first.verify || !consecutive) {
    AttentionState::ScanHead(g, args, run);
    return;
  }
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    UpdateHead(g, args.KeyValueOf(r), args.states[static_cast<size_t>(r)]);
  }
  const KvCache& kv = *first.kv;
  const int64_t kv_offset = static_cast<int64_t>(g) * head_dim_;
  const int group = q_heads_ / kv_heads_;
  const int64_t offset = kv_offset * group;
  const float* q = args.rows + run.first * args.width + offset;
  float* out = args.out + run.first * args.out_width + offset;
  if (args.products == cpu::LinearProducts::kBf16 && kv.format == KvFormat::kBf16 &&
      head_dim_ % 16 == 0 && cpu::Bf16ProductsSupported()) {
    SoftmaxReadCausalRunBf16Products(q, args.width, group, kv.keys16.data() + kv_offset,
                                     kv.values16.data() + kv_offset, first.position, run.count,
                                     kv.width, head_dim_, out, args.out_width);
    return;
  }
  WithRows(kv, kv_offset, [&](const auto* keys, const auto* values) {
    SoftmaxReadCausalRun(q, args.width, group, keys, values, first.position, run.count, kv.width,
                         head_dim_, out, args.out_width);
  });
}

int64_t SoftmaxState::PreparedWidth() const {
  if (!prepared()) return 0;
  return static_cast<int64_t>(q_heads_ + 2 * kv_heads_) * head_dim_;
}

KernelRowLayout SoftmaxState::PreparedLayout() const {
  const int64_t q = static_cast<int64_t>(q_heads_) * head_dim_, kv = KvWidth();
  return {q, q + kv, q + 2 * kv, q + 2 * kv};
}

int64_t SoftmaxState::AttendedWidth(int64_t d_model) const {
  return prepared() ? static_cast<int64_t>(q_heads_) * head_dim_ : d_model;
}

namespace {

// Prepared rows q [q_heads * dh] | k [kv_heads * dh] | v [kv_heads * dh] from the projection
// rows: optional per-head RMSNorms of q and k (q_norm empty: none), then RoPE at each row's
// position (inv_freq empty: none).
void PrepareGqaRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                    int64_t rows, std::span<const StateRef> states, float* prepared, int q_heads,
                    int kv_heads, int head_dim, const std::vector<float>& inv_freq,
                    const std::vector<float>& q_norm, const std::vector<float>& k_norm,
                    float norm_eps) {
  const int64_t width = static_cast<int64_t>(q_heads + 2 * kv_heads) * head_dim;
  const int half = head_dim / 2;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* out = prepared + r * width;
    std::copy(projection + r * projection_width, projection + r * projection_width + width, out);
    float* k = out + int64_t{q_heads} * head_dim;
    if (!q_norm.empty()) {  // every head of q, then of k, as rows of head_dim
      cpu::RmsNorm(out, q_heads, head_dim, q_norm.data(), norm_eps, out);
      cpu::RmsNorm(k, kv_heads, head_dim, k_norm.data(), norm_eps, k);
    }
    if (inv_freq.empty()) return;
    absl::InlinedVector<float, 256> cos_sin(static_cast<size_t>(2 * half));
    cpu::RopeAngles(states[static_cast<size_t>(r)].position, inv_freq.data(), half, cos_sin.data());
    cpu::RotateHalf(out, q_heads, half, cos_sin.data());  // q
    cpu::RotateHalf(k, kv_heads, half, cos_sin.data());   // k
  });
}

}  // namespace

void SoftmaxState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                               int64_t rows, std::span<const StateRef> states,
                               float* prepared) const {
  PrepareGqaRows(ctx, projection, projection_width, rows, states, prepared, q_heads_, kv_heads_,
                 head_dim_, rope_inv_freq_, q_norm_, k_norm_, norm_eps_);
}

// Window layout: keys [span, d_model] then values [span, d_model], span = (window - 1) *
// dilation + 1; token p lives in row p % span.
int64_t WindowState::FixedFloats() const { return 2 * span_ * n_heads_ * head_dim_; }

void WindowState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

void WindowState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  const int64_t slot = state.position % span_;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  std::copy(row.k + offset, row.k + offset + head_dim_, state.fixed + slot * width + offset);
  std::copy(row.v + offset, row.v + offset + head_dim_,
            state.fixed + (span_ + slot) * width + offset);
}

void WindowState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  // Softmax is order-independent, so the ring can be read in storage order.
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  if (q_heads_ != n_heads_) {  // GQA: the group's query heads read key/value head h
    const int group = q_heads_ / n_heads_;
    const int64_t q_offset = offset * group;
    const int64_t count = std::min<int64_t>(state.position + 1, window_);
    SoftmaxReadGroup(q + q_offset, group, state.fixed + offset,
                     state.fixed + window_ * width + offset, count, width, head_dim_,
                     out + q_offset);
    return;
  }
  if (dilation_ == 1) {
    const int64_t count = std::min<int64_t>(state.position + 1, window_);
    SoftmaxReadHead(q + offset, state.fixed + offset, state.fixed + window_ * width + offset, count,
                    width, head_dim_, out + offset);
    return;
  }
  // Dilated: positions t, t - d, ... (>= 0) sit at scattered ring rows; gather them (at most
  // `window` rows of this head) and read them as one block.
  const int64_t count = std::min<int64_t>(state.position / dilation_ + 1, window_);
  absl::InlinedVector<float, 1024> keys(static_cast<size_t>(count * head_dim_));
  absl::InlinedVector<float, 1024> values(keys.size());
  for (int64_t j = 0; j < count; ++j) {
    const int64_t slot = (state.position - j * dilation_) % span_;
    std::copy_n(state.fixed + slot * width + offset, head_dim_, keys.data() + j * head_dim_);
    std::copy_n(state.fixed + (span_ + slot) * width + offset, head_dim_,
                values.data() + j * head_dim_);
  }
  SoftmaxReadHead(q + offset, keys.data(), values.data(), count, head_dim_, head_dim_,
                  out + offset);
}

namespace {

// A thread's staging for WindowState::ScanHead's blocked reads (grown to the largest run, never
// shrunk).
struct WindowRunStaging {
  std::vector<float> keys, values;
};

WindowRunStaging& ThreadWindowRunStaging(int64_t floats) {
  thread_local WindowRunStaging staging;
  if (static_cast<int64_t>(staging.keys.size()) < floats) {
    staging.keys.resize(static_cast<size_t>(floats));
    staging.values.resize(static_cast<size_t>(floats));
  }
  return staging;
}

}  // namespace

void WindowState::ScanHead(int h, const ScanArgs& args, const RowRun& run) const {
  const StateRef& first = args.states[static_cast<size_t>(run.first)];
  bool blocked = dilation_ == 1 && run.count >= kSoftmaxBlockedRunRows && !first.verify;
  for (int64_t i = 0; blocked && i < run.count; ++i) {
    const StateRef& s = args.states[static_cast<size_t>(run.first + i)];
    blocked = s.fixed == first.fixed && s.position == first.position + i && s.checkpoint == nullptr;
  }
  if (!blocked) {
    AttentionState::ScanHead(h, args, run);
    return;
  }
  // The head's keys and values of positions [oldest, last]: the ring's rows still in the first
  // row's window, then the run's own rows; one causal run reads them, each query through its
  // window. Then the ring takes the run's rows (the last `window` of them decide it).
  const int64_t width = static_cast<int64_t>(n_heads_) * head_dim_;
  const int64_t offset = static_cast<int64_t>(h) * head_dim_;
  const int64_t oldest = std::max<int64_t>(0, first.position + 1 - window_);
  const int64_t cached = first.position - oldest;
  const int64_t staged_rows = cached + run.count;
  WindowRunStaging& staging = ThreadWindowRunStaging(staged_rows * head_dim_);
  float* keys = staging.keys.data();
  float* values = staging.values.data();
  for (int64_t j = 0; j < cached; ++j) {
    const int64_t slot = (oldest + j) % span_;
    std::copy_n(first.fixed + slot * width + offset, head_dim_, keys + j * head_dim_);
    std::copy_n(first.fixed + (span_ + slot) * width + offset, head_dim_, values + j * head_dim_);
  }
  for (int64_t i = 0; i < run.count; ++i) {
    const KeyValueRow row = args.KeyValueOf(run.first + i);
    std::copy_n(row.k + offset, head_dim_, keys + (cached + i) * head_dim_);
    std::copy_n(row.v + offset, head_dim_, values + (cached + i) * head_dim_);
  }
  const int group = q_heads_ / n_heads_;
  const int64_t q_offset = offset * group;
  SoftmaxReadWindowRun(args.rows + run.first * args.width + q_offset, args.width, group, keys,
                       values, cached, run.count, head_dim_, head_dim_, window_,
                       args.out + run.first * args.out_width + q_offset, args.out_width);
  for (int64_t r = std::max(run.first, run.first + run.count - window_); r < run.first + run.count;
       ++r) {
    UpdateHead(h, args.KeyValueOf(r), args.states[static_cast<size_t>(r)]);
  }
}

int64_t WindowState::PreparedWidth() const {
  if (!prepared()) return 0;
  return static_cast<int64_t>(q_heads_ + 2 * n_heads_) * head_dim_;
}

KernelRowLayout WindowState::PreparedLayout() const {
  const int64_t q = static_cast<int64_t>(q_heads_) * head_dim_,
                kv = static_cast<int64_t>(n_heads_) * head_dim_;
  return {q, q + kv, q + 2 * kv, q + 2 * kv};
}

void WindowState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                              int64_t rows, std::span<const StateRef> states,
                              float* prepared) const {
  PrepareGqaRows(ctx, projection, projection_width, rows, states, prepared, q_heads_, n_heads_,
                 head_dim_, rope_inv_freq_, q_norm_, k_norm_, norm_eps_);
}

int64_t WindowState::AttendedWidth(int64_t d_model) const {
  return prepared() ? static_cast<int64_t>(q_heads_) * head_dim_ : d_model;
}

}  // namespace abcd
