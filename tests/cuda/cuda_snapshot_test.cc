// CudaBackend::Snapshot / Restore / CheckSnapshot against the CPU backend, on every decoder-only
// golden fixture the device runs: both backends' snapshots after the same prompt have the same
// header and size and states within the tolerance; a CPU snapshot restored on CUDA, a CUDA
// snapshot restored on the CPU and one restored on CUDA again continue 16 greedy steps with the
// CPU's logits and tokens; a snapshot taken after a Rollback is the state of the accepted rows;
// and the refusals (unknown sequence, another model, corrupt, beyond max_context, no free slot)
// change nothing. fp32 weights. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/backend/cuda_backend.h"
#include "engine/model/model.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/fixtures.h"

namespace abcd::cuda {
namespace {

using abcd::testing::FixtureDir;
using abcd::testing::FixtureNames;

// A state's floats after a few tokens on two devices: looser than one kernel's tolerance.
constexpr float kSnapshotStateTolerance = 1e-3f;
constexpr int kSnapshotGreedySteps = 16;

CudaBackendOptions SnapshotOptions() {
  CudaBackendOptions options;
  options.max_sequences = 8;
  options.max_context = 256;
  options.weights = WeightType::kF32;
  options.cuda_graphs = false;
  return options;
}

class CudaSnapshotTest : public CudaTest {
 protected:
  std::unique_ptr<CudaBackend> Make(const std::string& dir,
                                    const CudaBackendOptions& options = SnapshotOptions()) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    models_.push_back(std::move(*model));
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
        CudaBackend::Create(*models_.back(), options);
    if (!backend.ok()) {
      EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented)
          << dir << ": " << backend.status();
      return nullptr;
    }
    EXPECT_TRUE((*backend)->snapshots_supported()) << dir;
    return std::move(*backend);
  }
  std::vector<std::unique_ptr<Model>> models_;
};

std::vector<int32_t> SnapshotPrompt(int32_t vocab, int length, int salt) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < length; ++i) tokens.push_back((i * 37 + 11 + salt) % vocab);
  return tokens;
}

SequenceId SnapshotPrompted(DecodeBackend& backend, const std::vector<int32_t>& prompt) {
  const SequenceId id = backend.Acquire().value();
  std::vector<DecodeRow> rows;
  for (int32_t t : prompt) rows.push_back({id, t, false});
  std::vector<float> logits;
  EXPECT_TRUE(backend.Decode(rows, &logits).ok());
  return id;
}

// Both snapshots restored into a CPU pool of `model` hold the same state within the tolerance.
void ExpectSameSnapshotState(const Model& model, const std::string& actual,
                             const std::string& expected, const std::string& what) {
  StatePool pool(model.state_layout(), int64_t{1} << 30);
  absl::StatusOr<SequenceId> a = pool.Restore(actual);
  absl::StatusOr<SequenceId> e = pool.Restore(expected);
  ASSERT_TRUE(a.ok()) << what << ": " << a.status();
  ASSERT_TRUE(e.ok()) << what << ": " << e.status();
  const SequenceState& as = *pool.Get(*a);
  const SequenceState& es = *pool.Get(*e);
  ASSERT_EQ(as.position, es.position) << what;
  ExpectClose(as.fixed, es.fixed, kSnapshotStateTolerance, what + " fixed block");
  ASSERT_EQ(as.kv.size(), es.kv.size()) << what;
  for (size_t i = 0; i < as.kv.size(); ++i) {
    const size_t n = static_cast<size_t>(es.kv[i].length * es.kv[i].width);
    ASSERT_EQ(as.kv[i].length, es.kv[i].length) << what;
    ExpectClose(std::span(as.kv[i].keys).first(n), std::span(es.kv[i].keys).first(n),
                kSnapshotStateTolerance, what + " keys");
    ExpectClose(std::span(as.kv[i].values).first(n), std::span(es.kv[i].values).first(n),
                kSnapshotStateTolerance, what + " values");
  }
}

int32_t SnapshotArgmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

TEST_F(CudaSnapshotTest, SnapshotsMoveBetweenCpuAndCudaAndContinueGreedily) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name));
    if (cuda == nullptr) continue;
    ++checked;
    const Model& model = *models_.back();
    CpuBackend cpu(model, int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    const std::vector<int32_t> prompt = SnapshotPrompt(vocab, 9, 0);
    const SequenceId cpu_original = SnapshotPrompted(cpu, prompt);
    const SequenceId cuda_original = SnapshotPrompted(*cuda, prompt);
    const std::string cpu_bytes = cpu.Snapshot(cpu_original).value();
    absl::StatusOr<std::string> cuda_bytes = cuda->Snapshot(cuda_original);
    ASSERT_TRUE(cuda_bytes.ok()) << name << ": " << cuda_bytes.status();
    // The same format: the same size (fp32 KV rows on both) and header, states within tolerance.
    EXPECT_EQ(cuda_bytes->size(), cpu_bytes.size()) << name;
    EXPECT_EQ(cuda_bytes->substr(0, 41), cpu_bytes.substr(0, 41)) << name << ": header";
    ExpectSameSnapshotState(model, *cuda_bytes, cpu_bytes, name + " CUDA vs CPU snapshot");
    for (DecodeBackend* backend :
         {static_cast<DecodeBackend*>(&cpu), static_cast<DecodeBackend*>(cuda.get())}) {
      EXPECT_TRUE(backend->CheckSnapshot(cpu_bytes).ok()) << name << " " << backend->name();
      EXPECT_TRUE(backend->CheckSnapshot(*cuda_bytes).ok()) << name << " " << backend->name();
    }
    absl::StatusOr<SequenceId> cuda_from_cpu = cuda->Restore(cpu_bytes);
    absl::StatusOr<SequenceId> cpu_from_cuda = cpu.Restore(*cuda_bytes);
    absl::StatusOr<SequenceId> cuda_from_cuda = cuda->Restore(*cuda_bytes);
    ASSERT_TRUE(cuda_from_cpu.ok()) << name << ": " << cuda_from_cpu.status();
    ASSERT_TRUE(cpu_from_cuda.ok()) << name << ": " << cpu_from_cuda.status();
    ASSERT_TRUE(cuda_from_cuda.ok()) << name << ": " << cuda_from_cuda.status();

    // 16 greedy steps of the CPU's own sequence; every restored one is fed the same tokens and
    // must give its logits and choose its token.
    int32_t token = prompt.back();
    for (int step = 0; step < kSnapshotGreedySteps; ++step) {
      const std::string where = name + " step " + std::to_string(step);
      std::vector<float> expected;
      const DecodeRow reference{cpu_original, token, true};
      ASSERT_TRUE(cpu.Decode({&reference, 1}, &expected).ok()) << where;
      const std::pair<DecodeBackend*, SequenceId> restored[] = {
          {cuda.get(), *cuda_from_cpu}, {&cpu, *cpu_from_cuda}, {cuda.get(), *cuda_from_cuda}};
      const char* kinds[] = {"CPU -> CUDA", "CUDA -> CPU", "CUDA -> CUDA"};
      for (int r = 0; r < 3; ++r) {
        std::vector<float> actual;
        const DecodeRow row{restored[r].second, token, true};
        ASSERT_TRUE(restored[r].first->Decode({&row, 1}, &actual).ok()) << where;
        ExpectClose(actual, expected, kLogitsTolerance, where + " " + kinds[r]);
        // Greedy: the CPU's token, or one within the tolerance of it (a near tie).
        const float best = *std::max_element(expected.begin(), expected.end());
        const float gap = best - expected[static_cast<size_t>(SnapshotArgmax(actual))];
        EXPECT_LE(gap, 2 * kLogitsTolerance * std::max(1.0f, std::abs(best)))
            << where << " " << kinds[r] << ": greedy token";
      }
      token = SnapshotArgmax(expected);
    }
    for (SequenceId id : {cuda_original, *cuda_from_cpu, *cuda_from_cuda}) cuda->Release(id);
    EXPECT_EQ(cuda->memory().sequences, 0) << name;
  }
  EXPECT_GT(checked, 0);
}

// After a verify pass and a Rollback, a CUDA snapshot holds the accepted rows' state: the CPU
// backend's snapshot of a sequence fed only those rows.
TEST_F(CudaSnapshotTest, SnapshotAfterRollbackIsTheAcceptedState) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name));
    if (cuda == nullptr) continue;
    ++checked;
    const Model& model = *models_.back();
    CpuBackend cpu(model, int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    const std::vector<int32_t> prompt = SnapshotPrompt(vocab, 5, 3);
    const std::vector<int32_t> drafts = SnapshotPrompt(vocab, 5, 17);
    const SequenceId a = SnapshotPrompted(*cuda, prompt);
    std::vector<DecodeRow> rows;
    for (int i = 0; i < 5; ++i) rows.push_back({a, drafts[i], true, /*checkpoint=*/i < 4});
    std::vector<float> logits;
    ASSERT_TRUE(cuda->Decode(rows, &logits).ok()) << name;
    ASSERT_TRUE(cuda->Rollback(a, 1).ok()) << name;  // prompt + drafts[0..1]
    absl::StatusOr<std::string> rolled_back = cuda->Snapshot(a);
    ASSERT_TRUE(rolled_back.ok()) << name << ": " << rolled_back.status();
    std::vector<int32_t> accepted = prompt;
    accepted.push_back(drafts[0]);
    accepted.push_back(drafts[1]);
    const std::string expected = cpu.Snapshot(SnapshotPrompted(cpu, accepted)).value();
    ExpectSameSnapshotState(model, *rolled_back, expected, name + " after rollback");
    cuda->Release(a);
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CudaSnapshotTest, RefusalsChangeNothing) {
  CudaBackendOptions options = SnapshotOptions();
  options.max_sequences = 2;
  options.max_context = 16;
  std::unique_ptr<CudaBackend> cuda = Make(FixtureDir("dec_mixed"), options);  // abc + softmax
  ASSERT_NE(cuda, nullptr);
  const Model& model = *models_.back();
  CpuBackend cpu(model, int64_t{1} << 30);
  const int32_t vocab = cuda->config().vocab_size;

  EXPECT_EQ(cuda->Snapshot(12345).status().code(), absl::StatusCode::kNotFound);
  const std::string fits =
      cpu.Snapshot(SnapshotPrompted(cpu, SnapshotPrompt(vocab, 16, 0))).value();
  const std::string too_long =
      cpu.Snapshot(SnapshotPrompted(cpu, SnapshotPrompt(vocab, 17, 0))).value();
  absl::Status status = cuda->CheckSnapshot(too_long);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("max_context"), std::string::npos) << status;
  EXPECT_EQ(cuda->Restore(too_long).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cuda->CheckSnapshot(fits.substr(0, fits.size() - 3)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda->Restore(fits.substr(0, fits.size() - 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto other = Model::Load(FixtureDir("dec_abc"));
  ASSERT_TRUE(other.ok()) << other.status();
  CpuBackend other_cpu(**other, int64_t{1} << 30);
  const std::string foreign = other_cpu.Snapshot(other_cpu.Acquire().value()).value();
  EXPECT_EQ(cuda->CheckSnapshot(foreign).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cuda->Restore(foreign).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cuda->memory().sequences, 0);

  // Both slots taken: RESOURCE_EXHAUSTED; then one free again, the snapshot restores.
  const SequenceId first = cuda->Restore(fits).value();
  const SequenceId second = cuda->Acquire().value();
  EXPECT_EQ(cuda->Restore(fits).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cuda->memory().sequences, 2);
  cuda->Release(second);
  absl::StatusOr<SequenceId> again = cuda->Restore(fits);
  ASSERT_TRUE(again.ok()) << again.status();
  // Through the device and back without a step: the CPU's bytes exactly. A full KV cache (16 of
  // 16 tokens) takes no more rows.
  EXPECT_EQ(cuda->Snapshot(first).value(), fits);
  EXPECT_EQ(cuda->Snapshot(*again).value(), fits);
  std::vector<float> logits;
  const DecodeRow row{first, 1, true};
  EXPECT_EQ(cuda->Decode({&row, 1}, &logits).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace abcd::cuda
