#include "engine/attention/gated_delta_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/attention/gated_delta_chunk.h"
#include "engine/attention/mixer_math.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/vector_math.h"

namespace abcd {
namespace {

// fla's softplus: x itself above 20.
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x / sqrt(sum x^2 + 1e-6) (fla's in-kernel q/k L2 norm).
void L2NormInPlace(float* x, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum + 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace

GatedDeltaState::GatedDeltaState(Options options) : o_(std::move(options)) {
  for (float a : o_.a_log) minus_a_.push_back(-std::exp(a));
}

int64_t GatedDeltaState::FixedFloats() const {
  return int64_t{o_.heads} * o_.key_dim * o_.value_dim;
}

void GatedDeltaState::Init(float* fixed) const { std::fill(fixed, fixed + FixedFloats(), 0.0f); }

std::pair<int64_t, int64_t> GatedDeltaState::HeadStateRange(int head) const {
  const int64_t floats = int64_t{o_.key_dim} * o_.value_dim;
  return {head * floats, floats};
}

int64_t GatedDeltaState::PreparedWidth() const {
  const int64_t gate = o_.output_gate ? int64_t{o_.heads} * o_.value_dim : 0;
  return PreparedLayout().extra + 2 * int64_t{o_.heads} + gate;
}

KernelRowLayout GatedDeltaState::PreparedLayout() const {
  const int64_t qk = int64_t{o_.kv_heads} * o_.key_dim;
  const int64_t v = int64_t{o_.heads} * o_.value_dim;
  const int64_t gate = o_.output_gate ? v : 0;
  return {qk, 2 * qk, 2 * qk + v, 2 * qk + v + 2 * int64_t{o_.heads} + gate};
}

void GatedDeltaState::PrepareRow(const float* in, float* out) const {
  const KernelRowLayout layout = PreparedLayout();
  const int K = o_.key_dim;
  const int64_t qk = int64_t{o_.kv_heads} * K;
  const int64_t v = int64_t{o_.heads} * o_.value_dim;
  std::copy(in, in + layout.extra, out);  // q | k | v
  if (o_.silu_qkv) cpu::SiluInPlace(out, layout.extra);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(K));
  for (int h = 0; h < o_.kv_heads; ++h) {
    float* q = out + int64_t{h} * K;
    L2NormInPlace(q, K);
    for (int c = 0; c < K; ++c) q[c] *= q_scale;
    L2NormInPlace(out + qk + int64_t{h} * K, K);
  }
  const float* gate_in = in + layout.extra;
  const float* a = gate_in + (o_.output_gate ? v : 0);
  const float* b = a + o_.heads;
  float* decay = out + layout.extra;
  float* beta = decay + o_.heads;
  for (int h = 0; h < o_.heads; ++h) {
    const size_t i = static_cast<size_t>(h);
    decay[h] = std::exp(minus_a_[i] * Softplus(a[h] + o_.dt_bias[i]));
    beta[h] = Sigmoid(b[h]) * (o_.allow_neg_eigval ? 2.0f : 1.0f);
  }
  if (o_.output_gate) std::copy(gate_in, gate_in + v, beta + o_.heads);
}

void GatedDeltaState::PrepareRows(CpuContext& ctx, const float* projection,
                                  int64_t projection_width, int64_t rows, std::span<const StateRef>,
                                  float* prepared) const {
  const int64_t width = PreparedWidth();
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    PrepareRow(projection + r * projection_width, prepared + r * width);
  });
}

void GatedDeltaState::Fold(int head, const KeyValueRow& row, float* S, const float* read,
                           float* out) const {
  const int K = o_.key_dim, V = o_.value_dim;
  const int qk_head = head / (o_.heads / o_.kv_heads);
  GatedDeltaFoldRow(row.k + int64_t{qk_head} * K, row.v + int64_t{head} * V, row.extra[head],
                    row.extra[o_.heads + head], read, K, V, S, out);
}

void GatedDeltaState::UpdateHead(int head, const KeyValueRow& row, const StateRef& state) const {
  Fold(head, row, state.fixed + int64_t{head} * o_.key_dim * o_.value_dim, nullptr, nullptr);
}

void GatedDeltaState::ReadHead(int head, const float* q, const StateRef& state, float* out) const {
  const int K = o_.key_dim, V = o_.value_dim;
  const float* query = q + int64_t{head / (o_.heads / o_.kv_heads)} * K;
  const float* S = state.fixed + int64_t{head} * K * V;
  float* y = out + int64_t{head} * V;
  std::fill(y, y + V, 0.0f);
  for (int c = 0; c < K; ++c) cpu::Axpy(y, query[c], S + int64_t{c} * V, V);
}

void GatedDeltaState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  const int K = o_.key_dim, V = o_.value_dim;
  const int qk_head = head / (o_.heads / o_.kv_heads);
  const float* first = args.rows + run.first * args.width;
  GatedDeltaHeadRows rows;
  rows.q = first + int64_t{qk_head} * K;
  rows.k = first + args.layout.k + int64_t{qk_head} * K;
  rows.v = first + args.layout.v + int64_t{head} * V;
  rows.decay = first + args.layout.extra + head;
  rows.beta = first + args.layout.extra + o_.heads + head;
  rows.stride = args.width;
  rows.out = args.out + run.first * args.out_width + int64_t{head} * V;
  rows.out_stride = args.out_width;
  rows.rows = run.count;
  // Every row of a run is one sequence's: one state.
  float* S = args.states[static_cast<size_t>(run.first)].fixed + int64_t{head} * K * V;
  if (run.count >= kGatedDeltaChunkMinRows && int64_t{K} * V >= kGatedDeltaChunkMinStateFloats) {
    GatedDeltaChunkScan(rows, K, V, S);
  } else {
    GatedDeltaRowScan(rows, K, V, S);
  }
}

void GatedDeltaState::FinishRows(CpuContext& ctx, const float* prepared, int64_t rows,
                                 float* attended) const {
  const int64_t width = AttendedWidth(0), prepared_width = PreparedWidth();
  const int64_t gate_offset = PreparedLayout().extra + 2 * int64_t{o_.heads};
  ctx.pool().ParallelFor(rows, [&](int64_t r) {
    float* row = attended + r * width;
    cpu::RmsNorm(row, o_.heads, o_.value_dim, o_.norm_weight.data(), o_.norm_eps, row);
    if (!o_.output_gate) return;
    cpu::SiluGateArray(prepared + r * prepared_width + gate_offset, row, width, row);
  });
}

}  // namespace abcd
