// The C++ engine against the PyTorch reference on every golden fixture: prefill logits at
// every prompt position and 32 teacher-forced decode steps within 1e-4; on the Hugging Face
// fixtures also 64 free-running greedy steps with the reference's ids and log-probabilities
// within 1e-3; prefill equal to token-by-token decoding; fork and snapshot/restore continuing
// with identical logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/model/model.h"
#include "engine/state/state_pool.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

using testing::FixtureDir;
using testing::Golden;
using testing::LoadGolden;
using testing::MaxAbsDiff;

constexpr float kReferenceTolerance = 1e-4f;
constexpr int64_t kBudget = int64_t{1} << 30;

class ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto model = Model::Load(FixtureDir(GetParam()));
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    golden_ = LoadGolden(GetParam());
    ASSERT_FALSE(golden_.prompt_ids.empty());
    pool_ = std::make_unique<StatePool>(model_->state_layout(), kBudget);
    vocab_ = model_->config().vocab_size;
  }

  SequenceId NewSequence() {
    auto id = pool_->Acquire();
    EXPECT_TRUE(id.ok()) << id.status();
    if (model_->config().is_encoder_decoder()) {
      EXPECT_TRUE(model_->Encode(golden_.source_ids, *id, *pool_).ok());
    }
    return *id;
  }

  // Feeds `tokens` in one Decode call, returning logits for every row.
  std::vector<float> Feed(SequenceId id, std::span<const int32_t> tokens) {
    std::vector<DecodeRow> rows;
    for (int32_t t : tokens) rows.push_back({id, t, true});
    std::vector<float> logits;
    const absl::Status status = model_->Decode(rows, *pool_, &logits);
    EXPECT_TRUE(status.ok()) << status;
    return logits;
  }

  // Teacher-forces the golden decode ids one step at a time.
  std::vector<float> DecodeSteps(SequenceId id) {
    std::vector<float> all;
    for (int32_t t : golden_.decode_ids) {
      std::vector<float> step = Feed(id, {&t, 1});
      all.insert(all.end(), step.begin(), step.end());
    }
    return all;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<StatePool> pool_;
  Golden golden_;
  int vocab_ = 0;
};

TEST_P(ParityTest, PrefillAndDecodeMatchReference) {
  const SequenceId id = NewSequence();
  const std::vector<float> prefill = Feed(id, golden_.prompt_ids);
  const float prefill_error = MaxAbsDiff(prefill, golden_.prefill_logits);
  EXPECT_LE(prefill_error, kReferenceTolerance);
  const std::vector<float> decoded = DecodeSteps(id);
  const float decode_error = MaxAbsDiff(decoded, golden_.decode_logits);
  EXPECT_LE(decode_error, kReferenceTolerance);
  std::printf("%s: max |logit - reference| prefill %.2e, 32 decode steps %.2e\n",
              GetParam().c_str(), prefill_error, decode_error);
}

TEST_P(ParityTest, GreedyDecodeMatchesReference) {
  if (golden_.greedy_ids.empty()) GTEST_SKIP() << "no greedy reference (not an hf_* fixture)";
  ASSERT_EQ(golden_.greedy_logprobs.size(), golden_.greedy_ids.size());
  const SequenceId id = NewSequence();
  std::vector<float> logits = Feed(id, golden_.prompt_ids);
  std::span<const float> last = std::span<const float>(logits).last(static_cast<size_t>(vocab_));
  float worst = 0.0f;
  for (size_t step = 0; step < golden_.greedy_ids.size(); ++step) {
    const int32_t token =
        static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    ASSERT_EQ(token, golden_.greedy_ids[step]) << "greedy step " << step;
    double sum = 0.0;
    for (float x : last) sum += std::exp(static_cast<double>(x - last[static_cast<size_t>(token)]));
    const float logprob = static_cast<float>(-std::log(sum));
    worst = std::max(worst, std::abs(logprob - golden_.greedy_logprobs[step]));
    EXPECT_NEAR(logprob, golden_.greedy_logprobs[step], 1e-3f) << "greedy step " << step;
    logits = Feed(id, {&token, 1});
    last = logits;
  }
  std::printf("%s: %zu greedy ids equal, max |log-prob - reference| %.2e\n", GetParam().c_str(),
              golden_.greedy_ids.size(), worst);
}

TEST_P(ParityTest, PrefillEqualsStepByStep) {
  const SequenceId batched = NewSequence();
  const SequenceId stepped = NewSequence();
  const std::vector<float> prefill = Feed(batched, golden_.prompt_ids);
  std::vector<float> steps;
  for (int32_t t : golden_.prompt_ids) {
    std::vector<float> step = Feed(stepped, {&t, 1});
    steps.insert(steps.end(), step.begin(), step.end());
  }
  EXPECT_LE(MaxAbsDiff(prefill, steps), 1e-5f);
  // The states agree too: both continue identically.
  EXPECT_LE(MaxAbsDiff(DecodeSteps(batched), DecodeSteps(stepped)), 1e-5f);
}

TEST_P(ParityTest, MixedBatchEqualsSeparateSequences) {
  // A prefill next to a decode step of another sequence in one Decode call.
  const SequenceId a = NewSequence();
  const SequenceId b = NewSequence();
  Feed(a, golden_.prompt_ids);
  std::vector<DecodeRow> rows;
  rows.push_back({a, golden_.decode_ids[0], true});
  for (int32_t t : golden_.prompt_ids) rows.push_back({b, t, true});
  std::vector<float> logits;
  ASSERT_TRUE(model_->Decode(rows, *pool_, &logits).ok());
  const std::span<const float> all(logits);
  EXPECT_LE(MaxAbsDiff(all.subspan(0, vocab_),
                       std::span<const float>(golden_.decode_logits).subspan(0, vocab_)),
            kReferenceTolerance);
  EXPECT_LE(MaxAbsDiff(all.subspan(vocab_), golden_.prefill_logits), kReferenceTolerance);
}

TEST_P(ParityTest, ForkContinuesIdentically) {
  const SequenceId original = NewSequence();
  Feed(original, golden_.prompt_ids);
  auto fork = pool_->Fork(original);
  ASSERT_TRUE(fork.ok()) << fork.status();
  const std::vector<float> from_fork = DecodeSteps(*fork);
  const std::vector<float> from_original = DecodeSteps(original);
  EXPECT_EQ(MaxAbsDiff(from_fork, from_original), 0.0f);
  EXPECT_LE(MaxAbsDiff(from_fork, golden_.decode_logits), kReferenceTolerance);
}

TEST_P(ParityTest, SnapshotRestoreContinuesIdentically) {
  const SequenceId original = NewSequence();
  Feed(original, golden_.prompt_ids);
  auto snapshot = pool_->Snapshot(original);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  const std::vector<float> expected = DecodeSteps(original);
  pool_->Release(original);
  auto restored = pool_->Restore(*snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(MaxAbsDiff(DecodeSteps(*restored), expected), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Golden, ParityTest, ::testing::ValuesIn(testing::FixtureNames()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace abcd
