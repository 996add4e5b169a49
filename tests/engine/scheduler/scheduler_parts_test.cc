// The scheduler's plain parts: capacity admission, prefill chunking and its time-based sizing,
// the step cost model, beam selection and incremental detokenisation with stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/beam_search.h"
#include "engine/scheduler/capacity_scheduler.h"
#include "engine/scheduler/text_stream.h"

namespace abcd {
namespace {

TEST(CapacityScheduler, AdmitsWhileBytesAndSequenceSlotsLast) {
  EXPECT_TRUE(CanAdmit({100, 0, 0, 10}, 100, 1));
  EXPECT_FALSE(CanAdmit({100, 1, 0, 10}, 100, 1));  // bytes
  EXPECT_TRUE(CanAdmit({100, 0, 8, 10}, 10, 2));
  EXPECT_FALSE(CanAdmit({100, 0, 8, 10}, 10, 3));  // n choices count as n sequences
  EXPECT_TRUE(CanAdmit({100, 0, 0, 4}, 10, 8));    // alone, a request may exceed the slots
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

TEST(BatchPlanner, TimePolicySizesPrefillToOneDecodeStep) {
  PrefillSizing s;
  s.decode_rows = 8;
  s.decode_step_seconds = 0.004;  // 4 ms for the 8 decode rows
  s.prompt_row_seconds = 0.0001;  // 0.1 ms a prompt row
  s.token_budget = 512;
  // 4 ms of prompt rows: the iteration takes at most about two decode steps.
  EXPECT_EQ(PrefillTokensForIteration(s), 40);
  // A budget above the decode step raises the extra time to it, not beyond.
  s.iteration_budget_seconds = 0.010;
  EXPECT_EQ(PrefillTokensForIteration(s), 100);
  s.iteration_budget_seconds = 0.001;  // below one decode step: the decode step wins
  EXPECT_EQ(PrefillTokensForIteration(s), 40);
  s.decode_step_share = 0.5;  // half a decode step
  EXPECT_EQ(PrefillTokensForIteration(s), 20);
  s.decode_step_share = 1.0;
  // The token budget stays the hard cap.
  s.token_budget = 25;
  EXPECT_EQ(PrefillTokensForIteration(s), 25);
  s.token_budget = 512;
  // Prompt rows dearer than a decode step: still one token, so the prompt progresses.
  s.prompt_row_seconds = 0.050;
  EXPECT_EQ(PrefillTokensForIteration(s), 1);
  // Nothing decoding: nothing to stall, full speed.
  s.decode_rows = 0;
  EXPECT_EQ(PrefillTokensForIteration(s), 512);
}

TEST(BatchPlanner, TimePolicyBeforeAnyMeasurementTakesAsManyTokensAsDecodeRows) {
  PrefillSizing s;
  s.decode_rows = 6;
  s.token_budget = 512;
  EXPECT_EQ(PrefillTokensForIteration(s), 6);  // both costs unknown
  s.decode_step_seconds = 0.004;
  EXPECT_EQ(PrefillTokensForIteration(s), 6);  // prompt row cost unknown
  s.decode_step_seconds = 0;
  s.prompt_row_seconds = 0.0001;
  EXPECT_EQ(PrefillTokensForIteration(s), 6);  // decode step unknown, no budget
  s.iteration_budget_seconds = 0.002;
  EXPECT_EQ(PrefillTokensForIteration(s), 20);  // the budget alone sizes it
  s.decode_rows = 600;
  s.iteration_budget_seconds = 0;
  EXPECT_EQ(PrefillTokensForIteration(s), 512);  // capped
  s.token_budget = 0;
  EXPECT_EQ(PrefillTokensForIteration(s), 1);  // never zero
}

// Overdue prompts are served before younger ones that precede them; what is left of the budget
// goes to the others in order, and the chunks come back in index order.
TEST(BatchPlanner, OverduePromptsAreServedFirst) {
  const std::vector<int64_t> overdue = {0, 0, 80, 0, 30};
  const std::vector<int64_t> others = {50, 0, 0, 40, 0};
  auto chunks = PlanPrefillOverdueFirst(overdue, others, 100);  // the overdue ones only
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].index, 2);
  EXPECT_EQ(chunks[0].tokens, 80);
  EXPECT_EQ(chunks[1].index, 4);
  EXPECT_EQ(chunks[1].tokens, 20);
  chunks = PlanPrefillOverdueFirst(overdue, others, 150);  // 40 left for the first younger one
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].index, 0);
  EXPECT_EQ(chunks[0].tokens, 40);
  EXPECT_EQ(chunks[1].index, 2);
  EXPECT_EQ(chunks[2].index, 4);
  EXPECT_EQ(chunks[2].tokens, 30);
  chunks = PlanPrefillOverdueFirst(overdue, others, 200);  // everything
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].tokens, 50);
  EXPECT_EQ(chunks[2].index, 3);
  EXPECT_EQ(chunks[2].tokens, 40);
  // None overdue: PlanPrefill over the others, progress with a zero budget included.
  chunks = PlanPrefillOverdueFirst(std::vector<int64_t>(5, 0), others, 0);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].index, 0);
  EXPECT_EQ(chunks[0].tokens, 1);
}

// The TTFT bound: overdue prompts' remaining tokens go in whole, whatever the time share, up
// to the token budget; fewer than the share change nothing.
TEST(BatchPlanner, OverduePromptsRaiseTheTimeShareToTheirRemainingTokens) {
  PrefillSizing s;
  s.decode_rows = 8;
  s.decode_step_seconds = 0.004;
  s.prompt_row_seconds = 0.0001;
  s.token_budget = 512;
  EXPECT_EQ(PrefillTokensForIteration(s), 40);  // the time share
  s.overdue_tokens = 129;
  EXPECT_EQ(PrefillTokensForIteration(s), 129);
  s.overdue_tokens = 30;  // less than the share: the share
  EXPECT_EQ(PrefillTokensForIteration(s), 40);
  s.overdue_tokens = 32 * 129;  // a wave: the token budget stays the hard cap
  EXPECT_EQ(PrefillTokensForIteration(s), 512);
  s.overdue_tokens = -3;  // none overdue
  EXPECT_EQ(PrefillTokensForIteration(s), 40);
  // Before any measurement the share is one token a decode row; overdue tokens still go in.
  s.decode_step_seconds = 0;
  s.prompt_row_seconds = 0;
  s.overdue_tokens = 100;
  EXPECT_EQ(PrefillTokensForIteration(s), 100);
  // Nothing decoding: the full budget either way.
  s.decode_rows = 0;
  EXPECT_EQ(PrefillTokensForIteration(s), 512);
}

TEST(BatchPlanner, PrefillPolicyParsesAndNamesTheFlag) {
  EXPECT_EQ(*ParsePrefillPolicy("time", "--prefill_policy"), PrefillPolicy::kTime);
  EXPECT_EQ(*ParsePrefillPolicy("tokens", "--prefill_policy"), PrefillPolicy::kTokens);
  const auto bad = ParsePrefillPolicy("fast", "--prefill_policy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--prefill_policy"), std::string::npos);
  EXPECT_EQ(PrefillPolicyName(PrefillPolicy::kTokens), "tokens");
}

TEST(StepCostModel, LearnsTheCostOfADecodeRowAndOfAPromptRow) {
  StepCostModel costs(0.9);
  EXPECT_EQ(costs.DecodeRowSeconds(), 0.0);
  EXPECT_EQ(costs.PromptRowSeconds(), 0.0);
  EXPECT_EQ(costs.DecodeStepSeconds(8), 0.0);
  // Decode-only iterations: both costs are the average time per row until prompt rows show.
  costs.Observe(8, 0, 0.004);
  EXPECT_DOUBLE_EQ(costs.DecodeRowSeconds(), 0.0005);
  EXPECT_DOUBLE_EQ(costs.PromptRowSeconds(), 0.0005);
  EXPECT_DOUBLE_EQ(costs.DecodeStepSeconds(16), 0.008);
  // A backend where a decode row takes 0.5 ms and a prompt row 0.1 ms, seen through mixed and
  // prefill-only iterations of varying mixes (as under load), is recovered exactly.
  const auto truth = [](int64_t d, int64_t p) { return 0.0005 * d + 0.0001 * p; };
  const int64_t mixes[][2] = {{8, 0}, {8, 40}, {6, 13}, {0, 129}, {7, 25}, {8, 3}, {5, 60}};
  for (int round = 0; round < 3; ++round) {
    for (const auto& m : mixes) costs.Observe(m[0], m[1], truth(m[0], m[1]));
  }
  EXPECT_NEAR(costs.DecodeRowSeconds(), 0.0005, 1e-9);
  EXPECT_NEAR(costs.PromptRowSeconds(), 0.0001, 1e-9);
  EXPECT_NEAR(costs.DecodeStepSeconds(32), 0.016, 1e-8);
  // The costs follow a slower machine: older iterations fade.
  for (int round = 0; round < 40; ++round) {
    for (const auto& m : mixes) costs.Observe(m[0], m[1], 2 * truth(m[0], m[1]));
  }
  EXPECT_NEAR(costs.DecodeRowSeconds(), 0.001, 1e-6);
  EXPECT_NEAR(costs.PromptRowSeconds(), 0.0002, 1e-6);
  // Bad observations change nothing.
  costs.Observe(0, 0, 1.0);
  costs.Observe(4, 0, -1.0);
  costs.Observe(4, 2, std::nan(""));
  costs.Observe(-1, 2, 0.001);
  EXPECT_NEAR(costs.DecodeRowSeconds(), 0.001, 1e-6);
}

TEST(StepCostModel, TheSameMixEveryTimeGivesTheAverageRowCost) {
  // Every iteration 4 decode rows and 4 prompt rows: the split cannot be told, so both costs
  // are the time per row rather than a guess from noise.
  StepCostModel costs(0.9);
  for (int i = 0; i < 20; ++i) costs.Observe(4, 4, 0.008 + (i % 2) * 0.0001);
  EXPECT_NEAR(costs.DecodeRowSeconds(), costs.PromptRowSeconds(), 1e-12);
  EXPECT_NEAR(costs.DecodeRowSeconds(), 0.001, 2e-5);
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

// Random id sequences over the whole vocabulary (byte-fallback pieces, control ids, pieces with
// and without a leading space, multi-byte characters) released incrementally equal decoding all
// ids at once; with a stop string, the text up to its first occurrence.
TEST_F(TextStreamTest, IncrementalEqualsFullDecodeOnRandomIds) {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (const char* dir : {"abc-lm-untrained", "abc-en-de", "abc-mt-untrained"}) {
    auto t = Tokenizer::Load(
        absl::StrCat(ABCD_SOURCE_DIR, "/models/checkpoints/", dir, "/tokenizer.model"));
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizers.push_back(*std::move(t));
  }
  std::mt19937 rng(1234);
  int with_stop = 0;
  for (const auto& tokenizer : tokenizers) {
    // Ids of multi-byte text too, so byte-fallback runs that form characters occur.
    auto multibyte =
        tokenizer->Encode("Grüße, naïve café — 日本語のテキスト 🙂 ∑ x²");
    ASSERT_TRUE(multibyte.ok());
    const int vocab = tokenizer->vocab_size();
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<int32_t> ids;
      const int length = 1 + static_cast<int>(rng() % 48);
      for (int i = 0; i < length; ++i) {
        const uint32_t kind = rng() % 4;
        if (kind == 0 && !multibyte->empty()) {
          ids.push_back((*multibyte)[rng() % multibyte->size()]);
        } else if (kind == 1) {
          ids.push_back(static_cast<int32_t>(rng() % std::min(vocab, 300)));  // bytes, controls
        } else {
          ids.push_back(static_cast<int32_t>(rng() % vocab));
        }
      }
      auto full = tokenizer->Decode(ids);
      ASSERT_TRUE(full.ok());
      std::vector<std::string> stop;
      std::string expected = *full;
      if (trial % 3 == 0 && full->size() > 4) {
        const size_t at = rng() % (full->size() - 2);
        stop.push_back(full->substr(at, 1 + rng() % 3));
        expected = full->substr(0, full->find(stop[0]));
        ++with_stop;
      }
      TextStream stream(*tokenizer, stop);
      std::string released;
      for (int32_t id : ids) {
        auto piece = stream.Append(id);
        ASSERT_TRUE(piece.ok());
        released += *piece;
        if (stream.stopped()) break;
      }
      released += stream.Flush();
      ASSERT_EQ(released, expected) << "trial " << trial << " ids " << absl::StrJoin(ids, ",");
    }
  }
  EXPECT_GT(with_stop, 100);
}

// O(new tokens): the window each Append decodes stays a few ids however long the text grows.
TEST_F(TextStreamTest, WindowStaysSmallOverLongText) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "This program is free software; you can redistribute it. ";
  auto ids = tokenizer_->Encode(text);
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 2000u);
  TextStream stream(*tokenizer_, {"never occurs"});
  std::string released;
  size_t widest = 0;
  for (int32_t id : *ids) {
    released += *stream.Append(id);
    widest = std::max(widest, stream.window_tokens());
  }
  released += stream.Flush();
  EXPECT_EQ(released, *tokenizer_->Decode(*ids));
  EXPECT_LE(widest, 4u);
}

}  // namespace
}  // namespace abcd
