#include "engine/attention/softmax_state.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd {

namespace {

constexpr int64_t kScoreChunk = 256;
// A staged chunk of keys (and one of values): 32 KiB each, so both stay in L1/L2 while every
// query head of a group reads them.
constexpr int64_t kStagedFloats = 8192;

inline float Load(const float* p, int64_t i) { return p[i]; }
inline float Load(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Eight floats as one value (GCC/Clang vector extension): compiled per clone of the functions
// that use it (one AVX register on x86-64-v3/v4, two SSE registers on the baseline).
using Float8 = float __attribute__((vector_size(32)));

// By reference: a vector passed by value changes the ABI between the clones (-Wpsabi).
inline void Load8(const float* p, Float8& v) { std::memcpy(&v, p, sizeof(v)); }

inline float Sum8(const Float8& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// scores[i] = q . keys[i] for `count` contiguous rows of head_dim. Each dot product keeps eight
// independent partial sums (columns c = j mod 8 in lane j), one vector FMA per eight columns;
// four rows at a time share each load of q.
ABCD_VECTOR_CLONES void Scores(const float* q, const float* keys, int64_t count, int head_dim,
                               float* scores) {
  const int whole = head_dim - head_dim % 8;
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float* k0 = keys + i * head_dim;
    const float* k1 = k0 + head_dim;
    const float* k2 = k1 + head_dim;
    const float* k3 = k2 + head_dim;
    Float8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int c = 0; c < whole; c += 8) {
      Float8 qc, x0, x1, x2, x3;
      Load8(q + c, qc);
      Load8(k0 + c, x0);
      Load8(k1 + c, x1);
      Load8(k2 + c, x2);
      Load8(k3 + c, x3);
      a0 += qc * x0;
      a1 += qc * x1;
      a2 += qc * x2;
      a3 += qc * x3;
    }
    float s0 = Sum8(a0), s1 = Sum8(a1), s2 = Sum8(a2), s3 = Sum8(a3);
    for (int c = whole; c < head_dim; ++c) {
      s0 += q[c] * k0[c];
      s1 += q[c] * k1[c];
      s2 += q[c] * k2[c];
      s3 += q[c] * k3[c];
    }
    scores[i] = s0;
    scores[i + 1] = s1;
    scores[i + 2] = s2;
    scores[i + 3] = s3;
  }
  for (; i < count; ++i) {
    const float* key = keys + i * head_dim;
    Float8 a = {};
    for (int c = 0; c < whole; c += 8) {
      Float8 qc, x;
      Load8(q + c, qc);
      Load8(key + c, x);
      a += qc * x;
    }
    float score = Sum8(a);
    for (int c = whole; c < head_dim; ++c) score += q[c] * key[c];
    scores[i] = score;
  }
}

// out = out * rescale + sum_i weights[i] values[i] over `count` contiguous rows of head_dim.
ABCD_VECTOR_CLONES void Accumulate(const float* weights, const float* values, int64_t count,
                                   int head_dim, float rescale, float* out) {
  for (int c = 0; c < head_dim; ++c) out[c] *= rescale;
  for (int64_t i = 0; i < count; ++i) {
    const float w = weights[i];
    const float* value = values + i * head_dim;
    for (int c = 0; c < head_dim; ++c) out[c] += w * value[c];
  }
}

// Rows ahead of the one being staged that Stage asks the memory system for: a head's rows are
// short (head_dim values) and `stride` apart, a pattern the hardware prefetchers follow poorly
// across pages, so without it every row waits for DRAM (3-4x slower reads of a long cache).
constexpr int64_t kPrefetchRows = 8;

// Copies `count` rows `stride` apart to contiguous fp32 rows of head_dim (bf16 widened).
template <typename T>
ABCD_VECTOR_CLONES void Stage(const T* rows, int64_t count, int64_t stride, int head_dim,
                              float* out) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int64_t i = 0; i < count; ++i) {
    const T* row = rows + i * stride;
    if (i + kPrefetchRows < count) {
      const T* ahead = row + kPrefetchRows * stride;
      for (int c = 0; c < head_dim; c += kPerLine) __builtin_prefetch(ahead + c);
    }
    float* to = out + i * head_dim;
    for (int c = 0; c < head_dim; ++c) to[c] = Load(row, c);
  }
}

// One query head's running softmax over the chunks of rows it has seen (flash-attention style:
// out holds the unnormalised sum, rescaled only when a chunk raises the maximum).
struct HeadRun {
  float max = -std::numeric_limits<float>::infinity();
  float denominator = 0.0f;
};

void ChunkStep(const float* q, const float* keys, const float* values, const float* bias, int64_t n,
               int head_dim, HeadRun& run, float* out) {
  float scores[kScoreChunk];
  Scores(q, keys, n, head_dim, scores);
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) scores[i] += bias[i];
  }
  float chunk_max = -std::numeric_limits<float>::infinity();  // n >= 1
  for (int64_t i = 0; i < n; ++i) chunk_max = std::max(chunk_max, scores[i]);
  const float new_max = std::max(run.max, chunk_max);
  const float rescale = std::exp(run.max - new_max);  // 0 on the first chunk
  for (int64_t i = 0; i < n; ++i) scores[i] -= new_max;
  cpu::ExpArray(scores, n, scores);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += scores[i];
  run.denominator = run.denominator * rescale + sum;
  Accumulate(scores, values, n, head_dim, rescale, out);
  run.max = new_max;
}

// The `group` query heads of one key/value head (GQA; 1 without it): q and out hold them
// head_dim apart. The rows are walked once, in chunks staged into contiguous fp32 scratch on the
// stack (bf16 widened, the next rows prefetched), and every head of the group reads each chunk
// from L1/L2: the cache is read from memory once per key/value head, not once per query head.
template <typename T>
void ReadGroup(const float* q, int group, const T* keys, const T* values, const float* bias,
               int64_t count, int64_t stride, int head_dim, float* out) {
  std::fill(out, out + int64_t{group} * head_dim, 0.0f);
  if (count == 0) return;
  const int64_t chunk = std::clamp<int64_t>(kStagedFloats / head_dim, 1, kScoreChunk);
  absl::InlinedVector<HeadRun, 8> runs(static_cast<size_t>(group));
  std::array<float, 2 * kStagedFloats> staged;  // 64 KiB; written before it is read
  float* staged_keys = staged.data();
  float* staged_values = staged_keys + chunk * head_dim;
  for (int64_t first = 0; first < count; first += chunk) {
    const int64_t n = std::min(chunk, count - first);
    Stage(keys + first * stride, n, stride, head_dim, staged_keys);
    Stage(values + first * stride, n, stride, head_dim, staged_values);
    const float* b = bias != nullptr ? bias + first : nullptr;
    for (int g = 0; g < group; ++g) {
      const int64_t at = int64_t{g} * head_dim;
      ChunkStep(q + at, staged_keys, staged_values, b, n, head_dim, runs[static_cast<size_t>(g)],
                out + at);
    }
  }
  for (int g = 0; g < group; ++g) {
    const float inv = 1.0f / runs[static_cast<size_t>(g)].denominator;
    float* o = out + int64_t{g} * head_dim;
    for (int c = 0; c < head_dim; ++c) o[c] *= inv;
  }
}

}  // namespace

void SoftmaxReadHead(const float* q, const float* keys, const float* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values, int64_t count,
                     int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const float* keys, const float* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values,
                     const float* bias, int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, 1, keys, values, bias, count, stride, head_dim, out);
}

void SoftmaxReadGroup(const float* q, int group, const float* keys, const float* values,
                      int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, group, keys, values, nullptr, count, stride, head_dim, out);
}

void SoftmaxReadGroup(const float* q, int group, const uint16_t* keys, const uint16_t* values,
                      int64_t count, int64_t stride, int head_dim, float* out) {
  ReadGroup(q, group, keys, values, nullptr, count, stride, head_dim, out);
}

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
