// The scheduler's plain parts: capacity admission, prefill chunking, beam selection and
// incremental detokenisation with stop strings.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/beam_search.h"
#include "engine/scheduler/capacity_scheduler.h"
#include "engine/scheduler/text_stream.h"

namespace abcd {
namespace {

TEST(CapacityScheduler, AdmitsInOrderWhileBytesAndSlotsLast) {
  const std::vector<int64_t> needs = {40, 30, 10, 50};
  EXPECT_EQ(PlanAdmission(needs, {100, 0, 0, 10}), 3);
  EXPECT_EQ(PlanAdmission(needs, {100, 50, 0, 10}), 1);
  EXPECT_EQ(PlanAdmission(needs, {100, 0, 8, 10}), 2);   // slot limit
  EXPECT_EQ(PlanAdmission(needs, {100, 70, 0, 10}), 0);  // head blocks; nobody overtakes it
}

TEST(CapacityScheduler, WorstCaseBytesCoverKvPages) {
  StateLayout bounded;
  bounded.initial_fixed.resize(100);
  bounded.kv_width = 8;
  EXPECT_EQ(RequestStateBytes(bounded, 10, 0, 1000, 1), 400);
  EXPECT_EQ(RequestStateBytes(bounded, 10, 0, 1000, 4), 1600);
  StateLayout softmax;
  softmax.kv_is_cross = {false, true};
  softmax.kv_width = 8;  // 64 bytes per token per layer
  // self: 10 + 20 tokens -> 32 (two pages); cross: 5 source tokens -> 16
  EXPECT_EQ(RequestStateBytes(softmax, 10, 5, 20, 1), 32 * 64 + 16 * 64);
}

TEST(BatchPlanner, SplitsPromptsUnderTheBudget) {
  const std::vector<int64_t> remaining = {0, 300, 500, 40};
  const auto chunks = PlanPrefill(remaining, 512);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].index, 1);
  EXPECT_EQ(chunks[0].tokens, 300);
  EXPECT_EQ(chunks[1].index, 2);
  EXPECT_EQ(chunks[1].tokens, 212);
  EXPECT_EQ(PlanPrefill(remaining, 0).size(), 1u);  // always makes progress
  EXPECT_TRUE(PlanPrefill(std::vector<int64_t>{0, 0}, 10).empty());
}

TEST(BeamSearch, PicksBestContinuationsAcrossBeams) {
  // Two beams, vocab 4 (eos = 0). Beam 1 is ahead by log(2).
  const std::vector<double> scores = {-std::log(2.0), 0.0};
  const std::vector<float> logits = {0,   0, 0, 0,   // beam 0: uniform
                                     8.5, 1, 9, 1};  // beam 1: token 2, then eos
  const BeamStep step = SelectBeams(scores, logits, 4, 2, 0);
  ASSERT_EQ(step.continuing.size(), 2u);
  EXPECT_EQ(step.continuing[0].parent, 1);
  EXPECT_EQ(step.continuing[0].token, 2);
  EXPECT_EQ(step.continuing[1].parent, 0);  // beam 0 beats beam 1's tokens 1 and 3
  EXPECT_EQ(step.continuing[1].token, 1);   // ties broken by id; token 0 is eos
  // Ranked within the top two before the beams filled up: beam 1's eos, then beam 0's.
  ASSERT_EQ(step.finished.size(), 2u);
  EXPECT_EQ(step.finished[0].parent, 1);
  EXPECT_EQ(step.finished[0].token, 0);
  EXPECT_EQ(step.finished[1].parent, 0);
  EXPECT_NEAR(step.continuing[0].score, 9 - std::log(std::exp(8.5) + 2 * std::exp(1) + std::exp(9)),
              1e-6);
}

class TextStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = Tokenizer::Load(std::string(ABCD_SOURCE_DIR) +
                                     "/models/checkpoints/abc-lm-untrained/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TextStreamTest, ConcatenatedReleasesEqualTheText) {
  auto ids = tokenizer_->Encode("This program is free software; you can redistribute it.");
  ASSERT_TRUE(ids.ok());
  TextStream stream(*tokenizer_, {});
  std::string released;
  for (int32_t id : *ids) released += *stream.Append(id);
  released += stream.Flush();
  EXPECT_EQ(released, "This program is free software; you can redistribute it.");
}

TEST_F(TextStreamTest, StopStringAcrossTokensIsCutAndNeverReleased) {
  auto ids = tokenizer_->Encode("free software; you can redistribute it");
  ASSERT_TRUE(ids.ok());
  TextStream stream(*tokenizer_, {"you can"});
  std::string released;
  for (int32_t id : *ids) {
    released += *stream.Append(id);
    EXPECT_EQ(released.find("you"), std::string::npos) << released;
    if (stream.stopped()) break;
  }
  EXPECT_TRUE(stream.stopped());
  EXPECT_EQ(released, "free software; ");
}

}  // namespace
}  // namespace abcd
