#include "engine/attention/softmax_state.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/elementwise.h"

namespace abcd {

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
  if (kv.bf16) {
    SoftmaxReadGroup(q + offset, group, kv.keys16.data() + kv_offset,
                     kv.values16.data() + kv_offset, count, kv.width, head_dim_, out + offset);
  } else {
    SoftmaxReadGroup(q + offset, group, kv.keys.data() + kv_offset, kv.values.data() + kv_offset,
                     count, kv.width, head_dim_, out + offset);
  }
}

namespace {

// Runs of at least this many rows (a prompt chunk) are read in blocks; shorter ones row by row.
constexpr int64_t kBlockedRunRows = 4;
// No split of a decode row's read is shorter than this many cached rows.
constexpr int64_t kMinSplitRows = 512;

// One task of SoftmaxState::Scan: a whole run (ScanHead), a decode row's whole read, or one
// piece of a split read (its partial results at `slot`).
struct ReadTask {
  int64_t run = 0;
  int head = 0;
  int64_t begin = 0, end = 0;  // rows read; end == 0: the whole run through ScanHead
  int64_t slot = -1;           // -1: the read is whole and written normalised to the output
};

}  // namespace

void SoftmaxState::ReadPartial(int g, const float* q, const KvCache& kv, int64_t begin, int64_t end,
                               SoftmaxPartial* partial, float* out) const {
  const int64_t kv_offset = static_cast<int64_t>(g) * head_dim_;
  const int group = q_heads_ / kv_heads_;
  const int64_t offset = kv_offset * group;
  if (kv.bf16) {
    SoftmaxReadPartial(q + offset, group, kv.keys16.data() + kv_offset,
                       kv.values16.data() + kv_offset, begin, end, kv.width, head_dim_, partial,
                       out);
  } else {
    SoftmaxReadPartial(q + offset, group, kv.keys.data() + kv_offset, kv.values.data() + kv_offset,
                       begin, end, kv.width, head_dim_, partial, out);
  }
}

void SoftmaxState::Scan(CpuContext& ctx, const ScanArgs& args) const {
  const int threads = ctx.pool().size();
  const auto rows_read = [&](const RowRun& run) {
    const StateRef& s = args.states[static_cast<size_t>(run.first)];
    return std::min(s.kv->length, s.position + 1);
  };
  int64_t decode_work = 0;  // cached rows read by the decode rows, all heads
  for (const RowRun& run : args.runs) {
    if (run.count == 1) decode_work += rows_read(run) * kv_heads_;
  }
  if (threads <= 1 || decode_work == 0) {
    AttentionState::Scan(ctx, args);
    return;
  }
  // Pieces small enough for four per thread, but none under kMinSplitRows rows.
  const int64_t piece = std::max(kMinSplitRows, (decode_work + 4 * threads - 1) / (4 * threads));
  std::vector<ReadTask> tasks;
  int64_t slots = 0;
  for (size_t i = 0; i < args.runs.size(); ++i) {
    const RowRun& run = args.runs[i];
    const int64_t index = static_cast<int64_t>(i);
    if (run.count > 1) {
      for (int h = 0; h < kv_heads_; ++h) tasks.push_back({index, h});
      continue;
    }
    // A decode row's key and value are written before any piece reads them.
    for (int h = 0; h < kv_heads_; ++h) {
      UpdateHead(h, args.KeyValueOf(run.first), args.states[static_cast<size_t>(run.first)]);
    }
    const int64_t count = rows_read(run);
    const int64_t pieces = (count + piece - 1) / piece;
    for (int h = 0; h < kv_heads_; ++h) {
      if (pieces == 1) {
        tasks.push_back({index, h, 0, count});
        continue;
      }
      for (int64_t p = 0; p < pieces; ++p) {
        const int64_t begin = count * p / pieces, end = count * (p + 1) / pieces;
        tasks.push_back({index, h, begin, end, slots++});
      }
    }
  }
  const int group = q_heads_ / kv_heads_;
  std::vector<SoftmaxPartial> partials(static_cast<size_t>(slots * group));
  std::vector<float> outs(static_cast<size_t>(slots * group * head_dim_));
  ctx.pool().ParallelFor(static_cast<int64_t>(tasks.size()), [&](int64_t t) {
    const ReadTask& task = tasks[static_cast<size_t>(t)];
    const RowRun& run = args.runs[static_cast<size_t>(task.run)];
    if (task.end == 0) {
      ScanHead(task.head, args, run);
      return;
    }
    const StateRef& state = args.states[static_cast<size_t>(run.first)];
    const float* q = args.rows + run.first * args.width;
    if (task.slot < 0) {
      ReadHead(task.head, q, state, args.out + run.first * args.out_width);
      return;
    }
    ReadPartial(task.head, q, *state.kv, task.begin, task.end, partials.data() + task.slot * group,
                outs.data() + task.slot * group * head_dim_);
  });
  // Merge the pieces of each split read: a task run of one (row, head) holds consecutive slots.
  for (size_t t = 0; t < tasks.size();) {
    const ReadTask& first = tasks[t];
    size_t end = t + 1;
    if (first.slot < 0) {
      t = end;
      continue;
    }
    while (end < tasks.size() && tasks[end].run == first.run && tasks[end].head == first.head) {
      ++end;
    }
    const RowRun& run = args.runs[static_cast<size_t>(first.run)];
    float* out = args.out + run.first * args.out_width + int64_t{first.head} * group * head_dim_;
    for (int g = 0; g < group; ++g) {
      SoftmaxMerge(partials.data() + first.slot * group + g, group,
                   outs.data() + (first.slot * group + g) * head_dim_, int64_t{group} * head_dim_,
                   static_cast<int>(end - t), head_dim_, out + int64_t{g} * head_dim_);
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
  if (run.count < kBlockedRunRows || !consecutive) {
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
  if (kv.bf16) {
    SoftmaxReadCausalRun(q, args.width, group, kv.keys16.data() + kv_offset,
                         kv.values16.data() + kv_offset, first.position, run.count, kv.width,
                         head_dim_, out, args.out_width);
  } else {
    SoftmaxReadCausalRun(q, args.width, group, kv.keys.data() + kv_offset,
                         kv.values.data() + kv_offset, first.position, run.count, kv.width,
                         head_dim_, out, args.out_width);
  }
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

void SoftmaxState::PrepareRows(CpuContext& ctx, const float* projection, int64_t projection_width,
                               int64_t rows, std::span<const StateRef> states,
                               float* prepared) const {
  const int64_t width = PreparedWidth();
  const int half = head_dim_ / 2;
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* out = prepared + r * width;
    std::copy(projection + r * projection_width, projection + r * projection_width + width, out);
    if (rope_inv_freq_.empty()) return;
    absl::InlinedVector<float, 256> cos_sin(static_cast<size_t>(2 * half));
    cpu::RopeAngles(states[static_cast<size_t>(r)].position, rope_inv_freq_.data(), half,
                    cos_sin.data());
    cpu::RotateHalf(out, q_heads_, half, cos_sin.data());                                   // q
    cpu::RotateHalf(out + int64_t{q_heads_} * head_dim_, kv_heads_, half, cos_sin.data());  // k
  });
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

}  // namespace abcd
