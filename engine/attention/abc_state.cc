#include "engine/attention/abc_state.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "engine/attention/slot_scan.h"
#include "engine/attention/softmax_state.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Slots per pass of the update (the stack buffers of the exp/log1p passes).
constexpr int kChunk = 64;

// Folds k, v into every slot with its weight w[j] (running means).
ABCD_VECTOR_CLONES void FoldIntoSlots(const float* k, const float* v, const float* w, int slots,
                                      int head_dim, float* keys, float* values) {
  for (int j = 0; j < slots; ++j) {
    const float wj = w[j];
    float* key = keys + static_cast<int64_t>(j) * head_dim;
    float* value = values + static_cast<int64_t>(j) * head_dim;
    for (int c = 0; c < head_dim; ++c) {
      key[c] += wj * (k[c] - key[c]);
      value[c] += wj * (v[c] - value[c]);
    }
  }
}

ABCD_VECTOR_CLONES void AddInto(const float* x, int n, float* y) {
  for (int c = 0; c < n; ++c) y[c] += x[c];
}

// a' of the learned controls (exp is the identity and never gets here); n <= kChunk.
void LogControl(AbcControl control, const float* a, int n, float* out) {
  if (control == AbcControl::kSigmoid) {
    // logsigmoid(a) = min(a, 0) - log1p(exp(-|a|)): finite for every finite a; exp(-|a|) is in
    // (0, 1], the range of the vectorised log1p.
    for (int j = 0; j < n; ++j) out[j] = -std::fabs(a[j]);
    cpu::ExpArray(out, n, out);
    cpu::Log1pUnitArray(out, n, out);
    for (int j = 0; j < n; ++j) out[j] = std::min(a[j], 0.0f) - out[j];
    return;
  }
  for (int j = 0; j < n; ++j) out[j] = a[j] > 0.0f ? std::log(a[j]) : kNegInf;
}

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t AbcState::FixedFloats() const { return n_heads_ * HeadFloats(); }

int64_t AbcState::ExtraColumns() const {
  return AbcControlIsLearned(control_) ? static_cast<int64_t>(n_heads_) * slots_ : 0;
}

void AbcState::Init(float* fixed) const {
  for (int h = 0; h < n_heads_; ++h) {
    float* head = fixed + h * HeadFloats();
    const int64_t means = 2 * static_cast<int64_t>(slots_) * head_dim_;
    std::fill(head, head + means, 0.0f);
    if (reduce_ == AbcReduce::kMean) std::fill(head + means, head + means + slots_, kNegInf);
  }
}

int AbcState::ClusterSlot(const float* k, const float* keys, const float* log_norm, int slots,
                          int head_dim) {
  int best = 0;
  float best_distance = std::numeric_limits<float>::infinity();
  for (int j = 0; j < slots; ++j) {
    if (log_norm[j] == kNegInf) return j;  // an empty slot first
    const float* centroid = keys + static_cast<int64_t>(j) * head_dim;
    float distance = 0.0f;
    for (int c = 0; c < head_dim; ++c) {
      const float diff = k[c] - centroid[c];
      distance += diff * diff;
    }
    if (distance < best_distance) {  // strict: ties keep the lowest j
      best_distance = distance;
      best = j;
    }
  }
  return best;
}

int AbcState::RandomSlot(int head, int64_t position) const {
  const uint64_t key = static_cast<uint64_t>(seed_) ^ (static_cast<uint64_t>(layer_id_) << 48) ^
                       (static_cast<uint64_t>(head) << 40) ^ static_cast<uint64_t>(position);
  return static_cast<int>(SplitMix64(key) % static_cast<uint64_t>(slots_));
}

namespace {

// The normalisers and fold weights of slots [0, n), n <= kChunk, for log-controls a:
//   L' = max(L, a) + log1p(exp(-|L - a|)),  w = exp(a - L')
// (L = -inf on the first write gives L' = a and w = 1 exactly). a = -inf is no write: L' = L and
// w = 0 (the guard keeps (-inf) - (-inf) out of a never-written slot). Whole-array exp/log1p
// passes.
void NormaliserStep(const float* a, int n, float* log_norm, float* weight) {
  float spread[kChunk] = {};  // (initialised: GCC 12 -O3 sees a maybe-uninitialized read)
  for (int j = 0; j < n; ++j) spread[j] = -std::fabs(log_norm[j] - a[j]);
  for (int j = 0; j < n; ++j) {
    if (std::isinf(log_norm[j]) && log_norm[j] < 0) spread[j] = kNegInf;
  }
  cpu::ExpArray(spread, n, spread);
  cpu::Log1pUnitArray(spread, n, spread);
  for (int j = 0; j < n; ++j) {
    const float updated = std::max(log_norm[j], a[j]) + spread[j];
    weight[j] = a[j] == kNegInf ? kNegInf : a[j] - updated;
    log_norm[j] = updated;
  }
  cpu::ExpArray(weight, n, weight);
}

}  // namespace

void AbcUpdateHead(const float* k, const float* v, const float* log_control, int slots,
                   int head_dim, float* keys, float* values, float* log_norm) {
  float weight[kChunk];
  for (int first = 0; first < slots; first += kChunk) {
    const int n = std::min(kChunk, slots - first);
    NormaliserStep(log_control + first, n, log_norm + first, weight);
    FoldIntoSlots(k, v, weight, n, head_dim, keys + static_cast<int64_t>(first) * head_dim,
                  values + static_cast<int64_t>(first) * head_dim);
  }
}

void AbcReadHead(const float* q, const float* keys, const float* values, const float* log_norm,
                 int slots, int head_dim, float* out) {
  const bool all_live = log_norm == nullptr || std::none_of(log_norm, log_norm + slots,
                                                            [](float l) { return l == kNegInf; });
  if (all_live) {
    // Reading n slots is softmax attention over n (key, value) pairs.
    SoftmaxReadHead(q, keys, values, slots, head_dim, head_dim, out);
    return;
  }
  // Online softmax over the live slots only.
  std::fill(out, out + head_dim, 0.0f);
  float max_score = kNegInf, total = 0.0f;
  for (int j = 0; j < slots; ++j) {
    if (log_norm[j] == kNegInf) continue;
    const int64_t row = static_cast<int64_t>(j) * head_dim;
    const float score = cpu::Dot(q, keys + row, head_dim);
    if (score > max_score) {
      const float rescale = std::exp(max_score - score);  // 0 on the first live slot
      for (int c = 0; c < head_dim; ++c) out[c] *= rescale;
      total *= rescale;
      max_score = score;
    }
    const float p = std::exp(score - max_score);
    total += p;
    for (int c = 0; c < head_dim; ++c) out[c] += p * values[row + c];
  }
  if (total > 0.0f) {
    for (int c = 0; c < head_dim; ++c) out[c] /= total;
  }
}

void AbcState::UpdateHead(int h, const KeyValueRow& row, const StateRef& state) const {
  float* head = state.fixed + h * HeadFloats();
  const int64_t means = static_cast<int64_t>(slots_) * head_dim_;
  const float* k = row.k + h * head_dim_;
  const float* v = row.v + h * head_dim_;
  float* keys = head;
  float* values = head + means;
  float* log_norm = head + 2 * means;
  if (control_ == AbcControl::kPosition) {
    if (state.position >= max_positions_) return;  // beyond N: refused by the executor
    const float* column = position_table_.data() + state.position;
    for (int j = 0; j < slots_; ++j) {
      const float phi = column[static_cast<int64_t>(j) * max_positions_];
      const int64_t offset = static_cast<int64_t>(j) * head_dim_;
      for (int c = 0; c < head_dim_; ++c) {
        keys[offset + c] += phi * k[c];
        values[offset + c] += phi * v[c];
      }
    }
    return;
  }
  if (control_ == AbcControl::kBlock) {
    const int64_t b = state.position / block_;
    const int64_t fill = state.position % block_ + 1;
    const int64_t offset = (b % slots_) * head_dim_;
    if (fill == 1) {  // the block's first token: overwrite (evicts block b - n)
      std::copy(k, k + head_dim_, keys + offset);
      std::copy(v, v + head_dim_, values + offset);
      return;
    }
    const float inverse = 1.0f / static_cast<float>(fill);
    for (int c = 0; c < head_dim_; ++c) {
      keys[offset + c] += (k[c] - keys[offset + c]) * inverse;
      values[offset + c] += (v[c] - values[offset + c]) * inverse;
    }
    return;
  }
  if (control_ == AbcControl::kRandom || control_ == AbcControl::kCluster) {
    const int j = control_ == AbcControl::kRandom
                      ? RandomSlot(h, state.position)
                      : ClusterSlot(k, keys, log_norm, slots_, head_dim_);
    const int64_t offset = static_cast<int64_t>(j) * head_dim_;
    if (reduce_ == AbcReduce::kSum) {
      AddInto(k, head_dim_, keys + offset);
      AddInto(v, head_dim_, values + offset);
      return;
    }
    const float zero = 0.0f;  // a' = 0 on the token's slot; every other slot is not written
    AbcUpdateHead(k, v, &zero, 1, head_dim_, keys + offset, values + offset, log_norm + j);
    return;
  }
  const float* control = row.extra + h * slots_;
  if (control_ == AbcControl::kExp) {
    AbcUpdateHead(k, v, control, slots_, head_dim_, keys, values, log_norm);
    return;
  }
  float log_control[kChunk];
  for (int first = 0; first < slots_; first += kChunk) {
    const int n = std::min(kChunk, slots_ - first);
    const int64_t offset = static_cast<int64_t>(first) * head_dim_;
    LogControl(control_, control + first, n, log_control);
    AbcUpdateHead(k, v, log_control, n, head_dim_, keys + offset, values + offset,
                  log_norm + first);
  }
}

void AbcState::ReadHead(int h, const float* q, const StateRef& state, float* out) const {
  const float* head = state.fixed + h * HeadFloats();
  const int64_t means = static_cast<int64_t>(slots_) * head_dim_;
  const float* log_norm = reduce_ == AbcReduce::kMean ? head + 2 * means : nullptr;
  int live = slots_;
  if (control_ == AbcControl::kBlock) {
    // Slots 0..b hold blocks until the ring is full (b: the block of the last token).
    live = static_cast<int>(std::min<int64_t>(slots_, state.position / block_ + 1));
  }
  AbcReadHead(q + h * head_dim_, head, head + means, log_norm, live, head_dim_,
              out + h * head_dim_);
}

void AbcState::ScanHead(int h, const ScanArgs& args, const RowRun& run) const {
  if (!AbcControlIsLearned(control_)) {  // one slot per token or no normalisers: row by row
    AttentionState::ScanHead(h, args, run);
    return;
  }
  // Learned controls: per row, the normalisers and weights of every slot, then one pass over the
  // keys (fold and score) and one over the values (fold and mix): the state is read and written
  // once per row, where UpdateHead then ReadHead read it twice.
  const int64_t means = static_cast<int64_t>(slots_) * head_dim_;
  absl::InlinedVector<float, 256> buffer(4 * static_cast<size_t>(slots_));
  float* log_control = buffer.data();
  float* weight = log_control + slots_;
  float* scores = weight + slots_;
  float* p = scores + slots_;
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    const StateRef& state = args.states[static_cast<size_t>(r)];
    float* keys = state.fixed + h * HeadFloats();
    float* values = keys + means;
    float* log_norm = keys + 2 * means;
    const KeyValueRow row = args.KeyValueOf(r);
    const float* control = row.extra + h * slots_;
    for (int first = 0; first < slots_; first += kChunk) {
      const int n = std::min(kChunk, slots_ - first);
      const float* a = control + first;
      if (control_ != AbcControl::kExp) {
        LogControl(control_, a, n, log_control + first);
        a = log_control + first;
      }
      NormaliserStep(a, n, log_norm + first, weight + first);
    }
    const float* q = args.rows + r * args.width + h * head_dim_;
    FoldSlotsAndScore(SlotFold::kMean, row.k + h * head_dim_, weight, q, slots_, head_dim_, keys,
                      scores);
    SlotSoftmax(scores, log_norm, slots_, p);  // no live slot: p = 0 and the read is 0
    FoldSlotsAndMix(SlotFold::kMean, row.v + h * head_dim_, weight, p, slots_, head_dim_, values,
                    args.out + r * args.out_width + h * head_dim_);
  }
}

}  // namespace abcd
