// Every attention type's CUDA decode step against the CPU AttentionState (Update then Read, row
// by row) on random inputs: outputs and updated states, over several consecutive steps, at
// batch sizes that do and do not split heads across blocks, with vectorised (dh % 4 == 0) and
// scalar shapes. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/attention/abc_state.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/linear_state.h"
#include "engine/attention/softmax_state.h"
#include "engine/ops/cpu_context.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

// Looser than kKernelTolerance where the first run on a GPU (H200) measured more: the two
// backends sum in different orders, and nvcc contracts a * b + c into FMAs where the CPU build
// does not. t2r's normaliser divides by a sum that can be small: up to 2.4e-5.
constexpr float kLinearTypesTolerance = 1e-4f;
// The 6,500-slot heads reduce over 200 times as many slots (the softmax sums, the slot
// mixtures): up to 9.7e-5.
constexpr float kLongReductionTolerance = 3e-4f;

// Host mirror of one step's inputs in the fused-projection layout [q | k | v | extra].
struct StepInputs {
  int64_t width = 0;        // floats per fused row
  std::vector<float> rows;  // [batch, width]
};

StepInputs RandomStep(int64_t batch, int64_t d, int64_t extra, uint32_t seed) {
  StepInputs inputs;
  inputs.width = 3 * d + extra;
  inputs.rows = RandomFloats(batch * inputs.width, seed, -2.0f, 2.0f);
  return inputs;
}

KeyValueRow RowOf(const StepInputs& inputs, int64_t b, int64_t d) {
  const float* row = inputs.rows.data() + b * inputs.width;
  return KeyValueRow{row + d, row + 2 * d, row + 3 * d};
}

// A batch of fixed-size states on the device (contiguous blocks) and its pointer array.
class DeviceStates {
 public:
  DeviceStates(CudaContext& context, const std::vector<float>& host, int64_t batch,
               int64_t floats) {
    absl::StatusOr<DeviceArray<float>> blocks = DeviceArray<float>::FromHost(context, host);
    EXPECT_TRUE(blocks.ok()) << blocks.status();
    if (!blocks.ok()) return;
    blocks_ = std::move(*blocks);
    std::vector<float*> pointers;
    for (int64_t b = 0; b < batch; ++b) pointers.push_back(blocks_.data() + b * floats);
    absl::StatusOr<DeviceArray<float*>> array = DeviceArray<float*>::FromHost(context, pointers);
    EXPECT_TRUE(array.ok()) << array.status();
    if (array.ok()) pointers_ = std::move(*array);
  }
  float* const* pointers() const { return pointers_.data(); }
  const DeviceArray<float>& blocks() const { return blocks_; }

 private:
  DeviceArray<float> blocks_;
  DeviceArray<float*> pointers_;
};

class AttentionCudaTest : public CudaTest {
 protected:
  // Runs `steps` steps of `state` on `batch` sequences on both backends and compares.
  // `device_step` launches the CUDA kernel for one step.
  template <typename DeviceStep>
  void CompareSteps(const AttentionState& state, int64_t d, int64_t batch, int steps,
                    const DeviceStep& device_step, const std::string& what,
                    float tolerance = kKernelTolerance) {
    const int64_t floats = state.FixedFloats();
    std::vector<float> host_states(batch * floats);
    for (int64_t b = 0; b < batch; ++b) state.Init(host_states.data() + b * floats);
    DeviceStates device_states(context(), host_states, batch, floats);
    for (int step = 0; step < steps; ++step) {
      const StepInputs inputs = RandomStep(batch, d, state.ExtraColumns(), 1000 + step);
      std::vector<float> expected(batch * d);
      for (int64_t b = 0; b < batch; ++b) {
        StateRef ref{host_states.data() + b * floats, nullptr, step};
        state.Update(RowOf(inputs, b, d), ref);
        state.Read(inputs.rows.data() + b * inputs.width, ref, expected.data() + b * d);
      }
      DeviceArray<float> rows = Upload(inputs.rows);
      DeviceArray<float> out = Upload(std::vector<float>(batch * d, NAN));
      const StepRows step_rows{batch,        rows.data(),
                               inputs.width, rows.data() + d,
                               inputs.width, device_states.pointers(),
                               out.data(),   d};
      ASSERT_TRUE(device_step(step_rows).ok()) << what;
      ExpectClose(Download(out), expected, tolerance,
                  what + " step " + std::to_string(step) + " output");
      if (HasFatalFailure()) return;
    }
    ExpectClose(Download(device_states.blocks()), host_states, tolerance, what + " state");
  }
};

// Prefill: sequences of several rows each, folded in by the scan form of the kernel, against
// the CPU doing the same rows one at a time.
class PrefillCudaTest : public CudaTest {
 protected:
  template <typename DeviceStep>
  void ComparePrefill(const AttentionState& state, int64_t d, const std::vector<int32_t>& counts,
                      const DeviceStep& device_step, const std::string& what,
                      float tolerance = kKernelTolerance) {
    const int64_t floats = state.FixedFloats();
    const int64_t sequences = static_cast<int64_t>(counts.size());
    std::vector<int32_t> first;
    int32_t rows = 0;
    for (int32_t count : counts) {
      first.push_back(rows);
      rows += count;
    }
    std::vector<float> host_states(sequences * floats);
    for (int64_t s = 0; s < sequences; ++s) state.Init(host_states.data() + s * floats);
    DeviceStates device_states(context(), host_states, sequences, floats);
    const StepInputs inputs = RandomStep(rows, d, state.ExtraColumns(), 77);
    std::vector<float> expected(rows * d);
    for (int64_t s = 0; s < sequences; ++s) {
      for (int32_t t = 0; t < counts[s]; ++t) {
        const int64_t r = first[s] + t;
        StateRef ref{host_states.data() + s * floats, nullptr, t};
        state.Update(RowOf(inputs, r, d), ref);
        state.Read(inputs.rows.data() + r * inputs.width, ref, expected.data() + r * d);
      }
    }
    DeviceArray<float> device_rows = Upload(inputs.rows);
    DeviceArray<float> out = Upload(std::vector<float>(rows * d, NAN));
    DeviceArray<int32_t> device_first = Upload(first), device_count = Upload(counts);
    StepRows step_rows{rows,         device_rows.data(),       inputs.width, device_rows.data() + d,
                       inputs.width, device_states.pointers(), out.data(),   d};
    step_rows.sequences = sequences;
    step_rows.first = device_first.data();
    step_rows.count = device_count.data();
    step_rows.longest_run = *std::max_element(counts.begin(), counts.end());
    ASSERT_TRUE(device_step(step_rows).ok()) << what;
    ExpectClose(Download(out), expected, tolerance, what + " prefill output");
    ExpectClose(Download(device_states.blocks()), host_states, tolerance, what + " prefill state");
  }
};

TEST_F(PrefillCudaTest, ScanEqualsStepByStep) {
  const std::vector<int32_t> counts = {1, 17, 3, 64};
  for (int slots : {32, 6}) {
    AbcState abc(4, 32, slots);
    const AbcShape shape{4, 32, slots};
    ComparePrefill(
        abc, 128, counts,
        [&](const StepRows& rows) { return AbcStep(context(), shape, rows, true); },
        "abc n" + std::to_string(slots));
  }
  LinearState elu(4, 32, std::make_unique<EluFeatureMap>(32), /*gated=*/false, 1e-6f);
  LinearAttentionParams params;
  params.n_heads = 4;
  params.head_dim = 32;
  params.kind = FeatureMapKind::kElu;
  params.eps = 1e-6f;
  ComparePrefill(
      elu, 128, counts,
      [&](const StepRows& rows) { return LinearAttentionStep(context(), params, rows); }, "elu");
}

// The scan form under the shared-memory cap: 300 one-row runs (a decode batch in a mixed pass)
// and runs of several rows, each over a head of 6500 abc slots.
TEST_F(PrefillCudaTest, ScanBeyondSharedMemoryEqualsStepByStep) {
  AbcState abc(1, 32, 6500);
  const AbcShape shape{1, 32, 6500};
  auto step = [&](const StepRows& rows) { return AbcStep(context(), shape, rows, true); };
  ComparePrefill(abc, 32, std::vector<int32_t>(300, 1), step, "abc n6500, 300 single rows",
                 kLongReductionTolerance);
  ComparePrefill(abc, 32, {5, 1, 9}, step, "abc n6500, runs of 5, 1, 9", kLongReductionTolerance);
}

struct Shape {
  int heads, head_dim, size;  // size: abc slots / rfa random features / t2r features
};

const Shape kShapes[] = {{4, 32, 32}, {2, 64, 8}, {3, 20, 6}};
const int64_t kBatches[] = {1, 7, 300};

TEST_F(AttentionCudaTest, AbcSelfMatchesCpu) {
  for (const Shape& shape : kShapes) {
    for (int64_t batch : kBatches) {
      AbcState cpu(shape.heads, shape.head_dim, shape.size);
      const AbcShape device_shape{shape.heads, shape.head_dim, shape.size};
      CompareSteps(
          cpu, static_cast<int64_t>(shape.heads) * shape.head_dim, batch, 5,
          [&](const StepRows& rows) { return AbcStep(context(), device_shape, rows, true); },
          "abc h" + std::to_string(shape.heads) + " dh" + std::to_string(shape.head_dim) + " n" +
              std::to_string(shape.size) + " batch " + std::to_string(batch));
      if (HasFatalFailure()) return;
    }
  }
}

// A head with more slots than one block's shared memory holds unsplit (about 5.9k at dh 32)
// is split even at a batch that fills the GPU: it used to fail at launch.
TEST_F(AttentionCudaTest, AbcSlotsBeyondSharedMemoryMatchCpu) {
  constexpr int kHeads = 1, kHeadDim = 32, kSlots = 6500;
  AbcState cpu(kHeads, kHeadDim, kSlots);
  const AbcShape device_shape{kHeads, kHeadDim, kSlots};
  CompareSteps(
      cpu, int64_t{kHeads} * kHeadDim, /*batch=*/300, 2,
      [&](const StepRows& rows) { return AbcStep(context(), device_shape, rows, true); },
      "abc n6500 batch 300", kLongReductionTolerance);
}

// Cross attention reads a built memory without changing it.
TEST_F(AttentionCudaTest, AbcReadOnlyMatchesCpuAndKeepsState) {
  for (const Shape& shape : kShapes) {
    const int64_t d = static_cast<int64_t>(shape.heads) * shape.head_dim, batch = 9;
    AbcState cpu(shape.heads, shape.head_dim, shape.size);
    const int64_t floats = cpu.FixedFloats();
    std::vector<float> host_states(batch * floats);
    for (int64_t b = 0; b < batch; ++b) {
      StateRef ref{host_states.data() + b * floats, nullptr, 0};
      cpu.Init(ref.fixed);
      for (int t = 0; t < 6; ++t) {  // a memory of 6 source tokens
        const StepInputs source = RandomStep(1, d, cpu.ExtraColumns(), 50 + 7 * b + t);
        cpu.Update(RowOf(source, 0, d), ref);
      }
    }
    DeviceStates device_states(context(), host_states, batch, floats);
    const StepInputs queries = RandomStep(batch, d, cpu.ExtraColumns(), 99);
    std::vector<float> expected(batch * d);
    for (int64_t b = 0; b < batch; ++b) {
      cpu.Read(queries.rows.data() + b * queries.width,
               StateRef{host_states.data() + b * floats, nullptr, 6}, expected.data() + b * d);
    }
    DeviceArray<float> rows = Upload(queries.rows);
    DeviceArray<float> out = Upload(std::vector<float>(batch * d, NAN));
    const StepRows step_rows{batch,         rows.data(),
                             queries.width, rows.data() + d,
                             queries.width, device_states.pointers(),
                             out.data(),    d};
    ASSERT_TRUE(
        AbcStep(context(), AbcShape{shape.heads, shape.head_dim, shape.size}, step_rows, false)
            .ok());
    ExpectClose(Download(out), expected, kKernelTolerance, "abc cross output");
    ExpectClose(Download(device_states.blocks()), host_states, 0.0f, "abc cross state");
  }
}

struct LinearCase {
  std::string name;
  FeatureMapKind kind;
  bool gated;
};

TEST_F(AttentionCudaTest, LinearTypesMatchCpu) {
  const LinearCase cases[] = {{"rfa gaussian", FeatureMapKind::kRfaGaussian, false},
                              {"rfa gaussian gated", FeatureMapKind::kRfaGaussian, true},
                              {"rfa arccos", FeatureMapKind::kRfaArccos, false},
                              {"t2r", FeatureMapKind::kT2r, false},
                              {"elu", FeatureMapKind::kElu, false}};
  for (const LinearCase& test_case : cases) {
    for (const Shape& shape : kShapes) {
      const int h = shape.heads, dh = shape.head_dim, r = shape.size;
      std::vector<float> projection = RandomFloats(static_cast<int64_t>(h) * r * dh, 7, -1, 1);
      std::vector<float> bias = RandomFloats(static_cast<int64_t>(h) * r, 8, -0.5f, 0.5f);
      std::unique_ptr<FeatureMap> phi;
      LinearAttentionParams params;
      params.n_heads = h;
      params.head_dim = dh;
      params.kind = test_case.kind;
      params.gated = test_case.gated;
      params.eps = test_case.kind == FeatureMapKind::kRfaGaussian ? 0.01f : 1e-6f;
      switch (test_case.kind) {
        case FeatureMapKind::kRfaGaussian:
        case FeatureMapKind::kRfaArccos:
          params.random_features = r;
          phi = std::make_unique<RandomFeatureMap>(h, dh, r,
                                                   test_case.kind == FeatureMapKind::kRfaGaussian
                                                       ? RfaKernel::kGaussian
                                                       : RfaKernel::kArccos,
                                                   projection);
          break;
        case FeatureMapKind::kT2r:
          params.learned_features = r;
          phi = std::make_unique<LearnedReluFeatureMap>(dh, r, projection, bias);
          break;
        case FeatureMapKind::kElu:
          phi = std::make_unique<EluFeatureMap>(dh);
          break;
      }
      DeviceArray<float> device_projection = Upload(projection);
      DeviceArray<float> device_bias = Upload(bias);
      params.projection = device_projection.data();
      params.bias = device_bias.data();
      LinearState cpu(h, dh, std::move(phi), test_case.gated, params.eps);
      for (int64_t batch : kBatches) {
        CompareSteps(
            cpu, static_cast<int64_t>(h) * dh, batch, 5,
            [&](const StepRows& rows) { return LinearAttentionStep(context(), params, rows); },
            test_case.name + " h" + std::to_string(h) + " dh" + std::to_string(dh) + " r" +
                std::to_string(r) + " batch " + std::to_string(batch),
            kLinearTypesTolerance);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Softmax: rows with very different cache lengths in one batch (0, short, one and several
// chunks), so the split-K grid has empty chunks for the short rows.
TEST_F(AttentionCudaTest, SoftmaxSplitKMatchesCpu) {
  for (const Shape& shape : {Shape{4, 32, 0}, Shape{2, 64, 0}, Shape{3, 20, 0}}) {
    const int h = shape.heads, dh = shape.head_dim;
    const int64_t d = static_cast<int64_t>(h) * dh;
    const std::vector<int32_t> lengths = {0, 5, 511, 512, 3000, 17};
    const int64_t batch = static_cast<int64_t>(lengths.size());
    const int64_t capacity = 3001;
    SoftmaxState cpu(h, dh);
    std::vector<KvCache> caches(batch);
    std::vector<DeviceArray<float>> device_keys, device_values;
    std::vector<float*> key_pointers, value_pointers;
    for (int64_t b = 0; b < batch; ++b) {
      KvCache& cache = caches[b];
      cache.width = d;
      cache.keys = RandomFloats(capacity * d, 300 + b, -1, 1);
      cache.values = RandomFloats(capacity * d, 400 + b, -1, 1);
      cache.length = lengths[b];
      device_keys.push_back(Upload(cache.keys));
      device_values.push_back(Upload(cache.values));
      key_pointers.push_back(device_keys.back().data());
      value_pointers.push_back(device_values.back().data());
    }
    DeviceArray<float*> keys = Upload(key_pointers), values = Upload(value_pointers);
    DeviceArray<int32_t> device_lengths = Upload(lengths);
    const StepInputs inputs = RandomStep(batch, d, 0, 5);
    std::vector<float> expected(batch * d);
    for (int64_t b = 0; b < batch; ++b) {
      StateRef ref{nullptr, &caches[b], lengths[b]};
      caches[b].length = lengths[b] + 1;  // the caller covers the new row (AttentionState)
      cpu.Update(RowOf(inputs, b, d), ref);
      cpu.Read(inputs.rows.data() + b * inputs.width, ref, expected.data() + b * d);
    }
    DeviceArray<float> rows = Upload(inputs.rows);
    DeviceArray<float> out = Upload(std::vector<float>(batch * d, NAN));
    const StepRows step_rows{batch,        rows.data(), inputs.width, rows.data() + d,
                             inputs.width, nullptr,     out.data(),   d};
    const KvCacheRows cache_rows{keys.data(), values.data(), device_lengths.data(), 3000};
    ASSERT_TRUE(SoftmaxStep(context(), h, h, dh, step_rows, cache_rows).ok());
    ExpectClose(Download(out), expected, kKernelTolerance, "softmax dh " + std::to_string(dh));
    for (int64_t b = 0; b < batch; ++b) {  // the new key and value were appended
      std::vector<float> keys_after = Download(device_keys[b]);
      ExpectClose(std::vector<float>(keys_after.begin() + lengths[b] * d,
                                     keys_after.begin() + (lengths[b] + 1) * d),
                  std::vector<float>(caches[b].keys.begin() + lengths[b] * d,
                                     caches[b].keys.begin() + (lengths[b] + 1) * d),
                  0.0f, "appended key");
    }
  }
}

// A softmax CUDA graph is captured for a context bucket: its grid covers `max_length` tokens
// while rows attend over fewer (the chunks past a row's length are empty), and it pads the
// batch with rows that have no cache (null pointers): they output zeros. Split grids with
// many empty chunks, and one-split grids (large batch, short bucket).
TEST_F(AttentionCudaTest, SoftmaxPaddingRowsAndALargerContextBound) {
  const int h = 4, dh = 32;
  const int64_t d = static_cast<int64_t>(h) * dh;
  struct Case {
    int64_t batch;
    int32_t max_length;
  };
  for (const Case& c : {Case{3, 1000}, Case{301, 200}, Case{301, 1000}}) {
    const std::string what = "softmax padding, batch " + std::to_string(c.batch) + ", bound " +
                             std::to_string(c.max_length);
    SoftmaxState cpu(h, dh);
    std::vector<KvCache> caches(c.batch);
    std::vector<int32_t> lengths(c.batch, 0);
    std::vector<DeviceArray<float>> device_keys, device_values;
    std::vector<float*> key_pointers(c.batch, nullptr), value_pointers(c.batch, nullptr);
    for (int64_t b = 0; b < c.batch; b += 2) {  // odd rows are padding
      KvCache& cache = caches[b];
      cache.width = d;
      cache.keys = RandomFloats(151 * d, 500 + b, -1, 1);
      cache.values = RandomFloats(151 * d, 700 + b, -1, 1);
      lengths[b] = static_cast<int32_t>((b * 37) % 150);
      cache.length = lengths[b];
      device_keys.push_back(Upload(cache.keys));
      device_values.push_back(Upload(cache.values));
      key_pointers[b] = device_keys.back().data();
      value_pointers[b] = device_values.back().data();
    }
    DeviceArray<float*> keys = Upload(key_pointers), values = Upload(value_pointers);
    DeviceArray<int32_t> device_lengths = Upload(lengths);
    const StepInputs inputs = RandomStep(c.batch, d, 0, 9);
    std::vector<float> expected(c.batch * d, 0.0f);
    for (int64_t b = 0; b < c.batch; b += 2) {
      StateRef ref{nullptr, &caches[b], lengths[b]};
      caches[b].length = lengths[b] + 1;  // the caller covers the new row (AttentionState)
      cpu.Update(RowOf(inputs, b, d), ref);
      cpu.Read(inputs.rows.data() + b * inputs.width, ref, expected.data() + b * d);
    }
    DeviceArray<float> rows = Upload(inputs.rows);
    DeviceArray<float> out = Upload(std::vector<float>(c.batch * d, NAN));
    const StepRows step_rows{c.batch,      rows.data(), inputs.width, rows.data() + d,
                             inputs.width, nullptr,     out.data(),   d};
    const KvCacheRows cache_rows{keys.data(), values.data(), device_lengths.data(), c.max_length};
    ASSERT_TRUE(SoftmaxStep(context(), h, h, dh, step_rows, cache_rows).ok()) << what;
    ExpectClose(Download(out), expected, kKernelTolerance, what);
  }
}

// Hugging Face layers' kernel rows (q | k | v, `stride` floats a row with 3 floats of padding):
// per-head q/k RMSNorms (or none) then RoPE (or none) in place on the device, against
// SoftmaxState::PrepareRows on the CPU. v and the padding stay untouched.
TEST_F(AttentionCudaTest, PrepareRotaryRowsMatchesPrepareRows) {
  struct RotaryCase {
    int q_heads, kv_heads, head_dim;
    bool norms, rope;
  };
  const std::vector<int64_t> positions = {0, 1, 77, 4097, 1 << 20};
  const int64_t batch = static_cast<int64_t>(positions.size());
  uint32_t seed = 900;
  for (const RotaryCase& c : {RotaryCase{8, 2, 64, false, true}, RotaryCase{8, 2, 64, true, true},
                              RotaryCase{4, 4, 32, true, true}, RotaryCase{6, 2, 18, true, true},
                              RotaryCase{6, 3, 18, false, true}, RotaryCase{2, 1, 256, true, true},
                              RotaryCase{4, 2, 128, true, false}}) {
    const std::string what = "rotary q" + std::to_string(c.q_heads) + " kv" +
                             std::to_string(c.kv_heads) + " dh" + std::to_string(c.head_dim) +
                             (c.norms ? " norms" : "") + (c.rope ? " rope" : "");
    const int half = c.head_dim / 2;
    std::vector<float> inv_freq;
    if (c.rope) {
      for (int i = 0; i < half; ++i) {
        inv_freq.push_back(static_cast<float>(1.0 / std::pow(1e6, 2.0 * i / c.head_dim)));
      }
    }
    const std::vector<float> q_norm =
        c.norms ? RandomFloats(c.head_dim, seed++, 0.5f, 1.5f) : std::vector<float>();
    const std::vector<float> k_norm =
        c.norms ? RandomFloats(c.head_dim, seed++, 0.5f, 1.5f) : std::vector<float>();
    const SoftmaxState cpu(c.q_heads, c.kv_heads, c.head_dim, inv_freq, q_norm, k_norm, 1e-6f);
    const int64_t width = int64_t{c.q_heads + 2 * c.kv_heads} * c.head_dim;
    ASSERT_EQ(cpu.PreparedWidth(), width) << what;
    const int64_t stride = width + 3;
    const std::vector<float> rows = RandomFloats(batch * stride, seed++, -3.0f, 3.0f);
    std::vector<StateRef> states(static_cast<size_t>(batch));
    for (int64_t r = 0; r < batch; ++r) states[r].position = positions[r];
    std::vector<float> prepared(batch * width, NAN);
    CpuContext ctx(1);
    cpu.PrepareRows(ctx, rows.data(), stride, batch, states, prepared.data());
    std::vector<float> expected = rows;  // the padding as it was
    for (int64_t r = 0; r < batch; ++r) {
      std::copy(prepared.begin() + r * width, prepared.begin() + (r + 1) * width,
                expected.begin() + r * stride);
    }

    DeviceArray<float> device_rows = Upload(rows);
    DeviceArray<int64_t> device_positions = Upload(positions);
    DeviceArray<float> device_inv_freq = Upload(c.rope ? inv_freq : std::vector<float>{0.0f});
    DeviceArray<float> device_q_norm = Upload(c.norms ? q_norm : std::vector<float>{0.0f});
    DeviceArray<float> device_k_norm = Upload(c.norms ? k_norm : std::vector<float>{0.0f});
    ASSERT_TRUE(PrepareRotaryRows(context(), device_rows.data(), stride, batch, c.q_heads,
                                  c.kv_heads, c.head_dim, device_positions.data(),
                                  c.rope ? device_inv_freq.data() : nullptr,
                                  c.norms ? device_q_norm.data() : nullptr,
                                  c.norms ? device_k_norm.data() : nullptr, 1e-6f)
                    .ok())
        << what;
    ExpectClose(Download(device_rows), expected, kKernelTolerance, what);
    if (HasFatalFailure()) return;
  }
  // Odd head_dim and a lone norm are refused.
  EXPECT_FALSE(PrepareRotaryRows(context(), nullptr, 9, 1, 1, 1, 3, nullptr,
                                 reinterpret_cast<const float*>(16), nullptr, nullptr, 1e-6f)
                   .ok());
  EXPECT_FALSE(PrepareRotaryRows(context(), nullptr, 8, 1, 1, 1, 4, nullptr, nullptr,
                                 reinterpret_cast<const float*>(16), nullptr, 1e-6f)
                   .ok());
}

// GQA softmax (query head h reads key/value head h / (n_heads / kv_heads)) over several
// consecutive steps, rows at very different cache lengths, against the CPU SoftmaxState with
// q_heads / kv_heads: outputs each step, the caches at the end.
TEST_F(AttentionCudaTest, SoftmaxGqaMatchesCpuOverSteps) {
  constexpr int kQueryHeads = 8, kKvHeads = 2, kSteps = 3;
  for (const int dh : {64, 18}) {
    for (const std::vector<int32_t>& start :
         {std::vector<int32_t>{700}, std::vector<int32_t>{0, 3, 200, 511, 1000, 64, 9}}) {
      const int64_t batch = static_cast<int64_t>(start.size());
      const std::string what =
          "softmax gqa dh " + std::to_string(dh) + " batch " + std::to_string(batch);
      const int64_t q_width = int64_t{kQueryHeads} * dh, kv_width = int64_t{kKvHeads} * dh;
      const int64_t width = q_width + 2 * kv_width;
      const int64_t capacity = 1000 + kSteps;
      const SoftmaxState cpu(kQueryHeads, kKvHeads, dh, {});
      std::vector<KvCache> caches(batch);
      std::vector<DeviceArray<float>> device_keys, device_values;
      std::vector<float*> key_pointers, value_pointers;
      for (int64_t b = 0; b < batch; ++b) {
        KvCache& cache = caches[b];
        cache.width = kv_width;
        cache.keys = RandomFloats(capacity * kv_width, 1100 + b, -1, 1);
        cache.values = RandomFloats(capacity * kv_width, 1200 + b, -1, 1);
        cache.length = start[b];
        device_keys.push_back(Upload(cache.keys));
        device_values.push_back(Upload(cache.values));
        key_pointers.push_back(device_keys.back().data());
        value_pointers.push_back(device_values.back().data());
      }
      DeviceArray<float*> keys = Upload(key_pointers), values = Upload(value_pointers);
      std::vector<int32_t> lengths = start;
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<float> rows = RandomFloats(batch * width, 1300 + step, -2.0f, 2.0f);
        std::vector<float> expected(batch * q_width);
        for (int64_t b = 0; b < batch; ++b) {
          const float* row = rows.data() + b * width;
          StateRef ref{nullptr, &caches[b], lengths[b]};
          caches[b].length = lengths[b] + 1;  // the caller covers the new row (AttentionState)
          cpu.Update(KeyValueRow{row + q_width, row + q_width + kv_width, nullptr}, ref);
          cpu.Read(row, ref, expected.data() + b * q_width);
        }
        DeviceArray<float> device_rows = Upload(rows);
        DeviceArray<int32_t> device_lengths = Upload(lengths);
        DeviceArray<float> out = Upload(std::vector<float>(batch * q_width, NAN));
        const StepRows step_rows{
            batch,   device_rows.data(), width,  device_rows.data() + q_width, width,
            nullptr, out.data(),         q_width};
        const KvCacheRows cache_rows{keys.data(), values.data(), device_lengths.data(),
                                     *std::max_element(lengths.begin(), lengths.end())};
        ASSERT_TRUE(SoftmaxStep(context(), kQueryHeads, kKvHeads, dh, step_rows, cache_rows).ok())
            << what;
        ExpectClose(Download(out), expected, kKernelTolerance,
                    what + " step " + std::to_string(step));
        if (HasFatalFailure()) return;
        for (int32_t& length : lengths) ++length;
      }
      for (int64_t b = 0; b < batch; ++b) {  // every step's key and value appended
        ExpectClose(Download(device_keys[b]), caches[b].keys, 0.0f, what + " keys");
        ExpectClose(Download(device_values[b]), caches[b].values, 0.0f, what + " values");
      }
    }
  }
}

// CUDA-graph buckets pad the batch with rows whose state pointer is null: they output zeros
// and leave every real row's output and state as if they were absent.
TEST_F(AttentionCudaTest, NullStateRowsArePadding) {
  for (int64_t batch : {3, 301}) {  // split and unsplit grids
    AbcState cpu(4, 32, 32);
    const int64_t d = 128, floats = cpu.FixedFloats();
    std::vector<float> host_states(batch * floats);
    for (int64_t b = 0; b < batch; ++b) cpu.Init(host_states.data() + b * floats);
    DeviceStates device_states(context(), host_states, batch, floats);
    std::vector<float*> pointers(batch);
    for (int64_t b = 0; b < batch; ++b) {
      pointers[b] = b % 2 == 1 ? nullptr : device_states.blocks().data() + b * floats;
    }
    DeviceArray<float*> device_pointers = Upload(pointers);
    const StepInputs inputs = RandomStep(batch, d, cpu.ExtraColumns(), 12);
    std::vector<float> expected(batch * d, 0.0f);
    for (int64_t b = 0; b < batch; b += 2) {
      StateRef ref{host_states.data() + b * floats, nullptr, 0};
      cpu.Update(RowOf(inputs, b, d), ref);
      cpu.Read(inputs.rows.data() + b * inputs.width, ref, expected.data() + b * d);
    }
    DeviceArray<float> rows = Upload(inputs.rows);
    DeviceArray<float> out = Upload(std::vector<float>(batch * d, NAN));
    const StepRows step_rows{batch,        rows.data(),
                             inputs.width, rows.data() + d,
                             inputs.width, device_pointers.data(),
                             out.data(),   d};
    ASSERT_TRUE(AbcStep(context(), AbcShape{4, 32, 32}, step_rows, true).ok());
    ExpectClose(Download(out), expected, kKernelTolerance, "padded abc output");
    ExpectClose(Download(device_states.blocks()), host_states, kKernelTolerance,
                "padded abc state");
  }
}

TEST_F(AttentionCudaTest, FillStatesCopiesTheEmptyState) {
  AbcState cpu(2, 8, 4);
  std::vector<float> empty(cpu.FixedFloats());
  cpu.Init(empty.data());
  const int64_t batch = 3;
  DeviceStates states(context(), RandomFloats(batch * cpu.FixedFloats(), 1), batch,
                      cpu.FixedFloats());
  DeviceArray<float> device_empty = Upload(empty);
  ASSERT_TRUE(
      FillStates(context(), states.pointers(), batch, device_empty.data(), cpu.FixedFloats()).ok());
  const std::vector<float> filled = Download(states.blocks());
  for (int64_t i = 0; i < batch * cpu.FixedFloats(); ++i) {
    ASSERT_EQ(filled[i], empty[i % cpu.FixedFloats()]) << i;
  }
}

}  // namespace
}  // namespace abcd::cuda
