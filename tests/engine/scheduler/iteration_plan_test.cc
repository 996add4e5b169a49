// PlanIteration without a backend: which rows one engine iteration runs and whose they are
// (decode rows, beams, backend-sampled rows, prefill chunks under the budget, snapshot stops).
#include "engine/scheduler/iteration_plan.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace abcd {
namespace executor_internal {
namespace {

// A decoder-only request on `sequence` whose prompt has `prompt` tokens (ids 100, 101, ...),
// `prefilled` of them already in the state.
std::unique_ptr<ActiveRequest> Request(SequenceId sequence, int prompt, int64_t prefilled) {
  auto r = std::make_unique<ActiveRequest>();
  r->sequence = sequence;
  r->has_sequence = true;
  r->encoded = true;
  r->prompt_ids.resize(prompt);
  std::iota(r->prompt_ids.begin(), r->prompt_ids.end(), 100);
  r->context = r->prompt_ids;
  r->prefilled = prefilled;
  return r;
}

// A request whose prompt is in and that sampled `pending` last step.
std::unique_ptr<ActiveRequest> Decoding(SequenceId sequence, int32_t pending, int generated = 1) {
  auto r = Request(sequence, 4, 4);
  r->pending_token = pending;
  for (int i = 0; i < generated; ++i) r->context.push_back(pending);
  return r;
}

PlanParams Tokens(int64_t budget) {
  PlanParams params;
  params.prefill_policy = PrefillPolicy::kTokens;
  params.prefill_token_budget = budget;
  return params;
}

TEST(IterationPlan, NothingRunningPlansNothing) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  const IterationPlan plan = PlanIteration(running, Tokens(8));
  EXPECT_TRUE(plan.empty());
  EXPECT_EQ(plan.decode_rows, 0);
  EXPECT_EQ(plan.prompt_rows(), 0);
}

// Speculation: the decode row, then the n-gram draft's rows (logits on all, a checkpoint after
// all but the last), in one sequence's consecutive rows next to a plain request's row; the
// draft stops one token short of max_tokens, and a request backing off gets a plain row.
TEST(IterationPlan, SpeculatingRequestVerifiesItsDraft) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  auto spec = Request(5, 4, 4);  // prompt 100 101 102 103, then generated 100 101 102
  spec->context.insert(spec->context.end(), {100, 101, 102});
  spec->pending_token = 102;
  spec->request.max_tokens = 16;
  spec->speculative = {SpeculativeMode::kNgram, 4};
  spec->pacer = DraftPacer(4);
  running.push_back(std::move(spec));
  running.push_back(Decoding(6, 42));
  IterationPlan plan = PlanIteration(running, Tokens(8));
  // Last tokens 100 101 102 occurred at the start, followed by 103 100 101 102.
  ASSERT_EQ(plan.rows.size(), 6u);
  const std::vector<int32_t> tokens = {102, 103, 100, 101, 102};
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(plan.rows[i].sequence, 5);
    EXPECT_EQ(plan.rows[i].token, tokens[i]);
    EXPECT_TRUE(plan.rows[i].want_logits);
    EXPECT_EQ(plan.rows[i].checkpoint, i + 1 < tokens.size()) << i;
  }
  EXPECT_EQ(plan.rows[5].sequence, 6);
  EXPECT_FALSE(plan.rows[5].checkpoint);
  EXPECT_EQ(plan.row_owners, (std::vector<size_t>{0, 0, 0, 0, 0, 1}));
  ASSERT_EQ(plan.drafts.size(), 1u);
  EXPECT_EQ(plan.drafts[0].request, 0u);
  EXPECT_EQ(plan.drafts[0].tokens, (std::vector<int32_t>{103, 100, 101, 102}));
  EXPECT_EQ(plan.decode_rows, 6);

  // Three tokens left: a draft of two (the step then yields at most three).
  running[0]->request.max_tokens = 6;
  plan = PlanIteration(running, Tokens(8));
  ASSERT_EQ(plan.drafts.size(), 1u);
  EXPECT_EQ(plan.drafts[0].tokens, (std::vector<int32_t>{103, 100}));
  // One token left, or backing off: a plain row.
  running[0]->request.max_tokens = 4;
  EXPECT_TRUE(PlanIteration(running, Tokens(8)).drafts.empty());
  running[0]->request.max_tokens = 16;
  running[0]->pacer.Observe(4, 0);
  plan = PlanIteration(running, Tokens(8));
  EXPECT_TRUE(plan.drafts.empty());
  EXPECT_EQ(plan.rows.size(), 2u);
  EXPECT_FALSE(plan.rows[0].checkpoint);
}

TEST(IterationPlan, OneDecodeRowPerSequenceAndOnePerBeam) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Decoding(7, 42));
  auto beams = Request(8, 3, 3);
  beams->request.beam_size = 2;
  beams->beams = {{8, {5, 6}, -1.0}, {9, {5, 11}, -2.0}};
  running.push_back(std::move(beams));
  const IterationPlan plan = PlanIteration(running, Tokens(8));
  ASSERT_EQ(plan.rows.size(), 3u);
  EXPECT_EQ(plan.rows[0].sequence, 7);
  EXPECT_EQ(plan.rows[0].token, 42);
  EXPECT_EQ(plan.rows[1].sequence, 8);
  EXPECT_EQ(plan.rows[1].token, 6);  // each beam feeds its own last token
  EXPECT_EQ(plan.rows[2].sequence, 9);
  EXPECT_EQ(plan.rows[2].token, 11);
  for (const DecodeRow& row : plan.rows) EXPECT_TRUE(row.want_logits);
  EXPECT_EQ(plan.row_owners, (std::vector<size_t>{0, 1, 1}));
  EXPECT_EQ(plan.decode_rows, 3);
  EXPECT_EQ(plan.prompt_rows(), 0);
  EXPECT_TRUE(plan.sampled_rows.empty());
  EXPECT_TRUE(plan.chunks.empty());
}

TEST(IterationPlan, BackendSamplesOnlyRowsThatNeedNoLogits) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Decoding(1, 10, 3));
  running.push_back(Decoding(2, 20));
  running.back()->request.sampling.repetition_penalty = 1.2f;  // needs the host's context
  running.push_back(Decoding(3, 30));
  running.back()->request.logprobs = 0;  // needs the logits
  running.push_back(Decoding(4, 40));
  running.back()->request.sampling.temperature = 0.7f;
  running.back()->request.sampling.seed = 9;
  running.push_back(Decoding(5, 50));
  running.back()->request.response_format = JsonGrammar::AnyObject();  // the mask is the host's
  PlanParams params = Tokens(8);
  params.backend_samples = true;
  const IterationPlan plan = PlanIteration(running, params);
  ASSERT_EQ(plan.sampled_rows.size(), 2u);
  EXPECT_EQ(plan.sampled_owners, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(plan.sampled_rows[0].sequence, 1);
  EXPECT_EQ(plan.sampled_rows[0].token, 10);
  EXPECT_EQ(plan.sampled_rows[0].step, 3u);  // the draw's index: tokens generated so far
  EXPECT_EQ(plan.sampled_rows[1].sampling.seed, 9u);
  EXPECT_EQ(plan.row_owners, (std::vector<size_t>{1, 2, 4}));
  EXPECT_EQ(plan.decode_rows, 5);
  // Without a sampling backend every row comes back as logits.
  params.backend_samples = false;
  const IterationPlan host = PlanIteration(running, params);
  EXPECT_TRUE(host.sampled_rows.empty());
  EXPECT_EQ(host.row_owners, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

TEST(IterationPlan, PrefillChunksShareTheBudgetInOrderAndOnlyTheLastRowWantsLogits) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Decoding(1, 10));
  running.push_back(Request(2, 5, 2));  // 3 tokens left
  running.push_back(Request(3, 9, 0));  // 9 left, 4 fit
  running.push_back(Request(4, 6, 0));  // nothing left in the budget
  const IterationPlan plan = PlanIteration(running, Tokens(7));
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].request, 1u);
  EXPECT_EQ(plan.chunks[0].start, 2);
  EXPECT_EQ(plan.chunks[0].tokens, 3);
  EXPECT_EQ(plan.chunks[1].request, 2u);
  EXPECT_EQ(plan.chunks[1].start, 0);
  EXPECT_EQ(plan.chunks[1].tokens, 4);
  ASSERT_EQ(plan.rows.size(), 8u);  // 1 decode row + 3 + 4 prompt rows
  EXPECT_EQ(plan.decode_rows, 1);
  EXPECT_EQ(plan.prompt_rows(), 7);
  EXPECT_EQ(plan.rows[1].sequence, 2);
  EXPECT_EQ(plan.rows[1].token, 102);
  EXPECT_FALSE(plan.rows[1].want_logits);
  EXPECT_TRUE(plan.rows[3].want_logits);  // request 2's last prompt token
  EXPECT_EQ(plan.rows[4].token, 100);
  for (size_t i = 4; i < 8; ++i) EXPECT_FALSE(plan.rows[i].want_logits);  // mid-prompt
  EXPECT_EQ(plan.row_owners, (std::vector<size_t>{0, 1}));
  // The plan is data: the requests are not advanced until the apply step.
  EXPECT_EQ(running[1]->prefilled, 2);
  EXPECT_EQ(running[2]->prefilled, 0);
}

TEST(IterationPlan, PromptLogprobsWantEveryPromptRow) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Request(5, 4, 0));
  running.back()->request.prompt_logprobs = true;
  const IterationPlan plan = PlanIteration(running, Tokens(16));
  ASSERT_EQ(plan.rows.size(), 4u);
  for (const DecodeRow& row : plan.rows) EXPECT_TRUE(row.want_logits);
  EXPECT_EQ(plan.row_owners, (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(IterationPlan, PrefillStopsWhereAPrefixSnapshotIsDue) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Request(1, 10, 0));
  running.back()->snapshot_at = 4;
  running.back()->snapshot_end_at = 9;
  IterationPlan plan = PlanIteration(running, Tokens(64));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].tokens, 4);
  running[0]->prefilled = 4;
  running[0]->snapshot_at = 0;  // taken
  plan = PlanIteration(running, Tokens(64));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].start, 4);
  EXPECT_EQ(plan.chunks[0].tokens, 5);  // up to the snapshot before the last token
  EXPECT_TRUE(plan.row_owners.empty());
}

// A backend that cuts snapshots from a later state (KV caches only) is not stopped by them.
TEST(IterationPlan, PrefillPassesSnapshotsThatAreCutFromALaterState) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Request(1, 10, 0));
  running.back()->snapshot_at = 4;
  running.back()->snapshot_end_at = 9;
  running.back()->snapshots_cut = true;
  const IterationPlan plan = PlanIteration(running, Tokens(64));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].tokens, 10);
}

TEST(IterationPlan, NoPrefillBeforeTheSourceIsEncodedOrAfterTheRequestEnded) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  running.push_back(Request(1, 3, 0));
  running.back()->encoded = false;
  running.push_back(Request(2, 3, 0));
  running.back()->done = true;
  EXPECT_TRUE(PlanIteration(running, Tokens(64)).empty());
  running[0]->encoded = true;
  const IterationPlan plan = PlanIteration(running, Tokens(64));
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].request, 0u);
}

TEST(IterationPlan, TimePolicySizesPrefillFromTheMeasuredCosts) {
  std::vector<std::unique_ptr<ActiveRequest>> running;
  for (int i = 0; i < 4; ++i) running.push_back(Decoding(i + 1, 10));
  running.push_back(Request(9, 200, 0));
  PlanParams params;
  params.prefill_policy = PrefillPolicy::kTime;
  params.prefill_token_budget = 512;
  // Nothing measured yet: as many prompt tokens as decode rows.
  EXPECT_EQ(PlanIteration(running, params).prompt_rows(), 4);
  // A decode row 1 ms, a prompt row 0.1 ms: one decode step of the 5 sequences (5 ms) buys 50.
  StepCostModel costs;
  costs.Observe(4, 0, 0.004);
  costs.Observe(0, 10, 0.001);
  params.costs = &costs;
  EXPECT_NEAR(costs.DecodeRowSeconds(), 0.001, 1e-9);
  EXPECT_NEAR(costs.PromptRowSeconds(), 0.0001, 1e-9);
  EXPECT_EQ(PlanIteration(running, params).prompt_rows(), 50);
  // Nothing decoding: full speed, up to the token budget.
  std::vector<std::unique_ptr<ActiveRequest>> alone;
  alone.push_back(Request(9, 600, 0));
  EXPECT_EQ(PlanIteration(alone, params).prompt_rows(), 512);
}

// The TTFT bound (PlanParams::prefill_deadline_ms): a prompt enqueued longer ago than the
// deadline gets its whole remainder (up to the token budget and to a due prefix snapshot); a
// younger one the time policy's share. Only prompts that can be prefilled count.
TEST(IterationPlan, OverduePromptGetsItsWholeRemainderAndAYoungOneTheTimeShare) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  std::vector<std::unique_ptr<ActiveRequest>> running;
  for (int i = 0; i < 4; ++i) running.push_back(Decoding(i + 1, 10));
  running.push_back(Request(8, 200, 20));  // the older prompt, 180 tokens left
  running.back()->enqueued = start;
  running.push_back(Request(9, 100, 0));  // a younger one
  running.back()->enqueued = start + absl::Milliseconds(900);
  StepCostModel costs;  // a decode row 1 ms, a prompt row 0.1 ms
  costs.Observe(4, 0, 0.004);
  costs.Observe(0, 10, 0.001);
  PlanParams params;
  params.prefill_policy = PrefillPolicy::kTime;
  params.prefill_token_budget = 512;
  params.prefill_deadline_ms = 1000;
  params.costs = &costs;
  // Neither overdue: one decode step of the 6 sequences (6 ms) buys 60 prompt tokens.
  params.now = start + absl::Milliseconds(1000);
  IterationPlan plan = PlanIteration(running, params);
  EXPECT_EQ(plan.prompt_rows(), 60);
  EXPECT_FALSE(plan.overdue_widened);
  // The older prompt overdue: its 180 remaining tokens, the younger one nothing this time.
  params.now = start + absl::Milliseconds(1500);
  plan = PlanIteration(running, params);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].request, 4u);
  EXPECT_EQ(plan.chunks[0].start, 20);
  EXPECT_EQ(plan.chunks[0].tokens, 180);
  EXPECT_TRUE(plan.overdue_widened);
  // Both overdue: both remainders, capped by the token budget.
  params.now = start + absl::Milliseconds(2000);
  EXPECT_EQ(PlanIteration(running, params).prompt_rows(), 280);
  params.prefill_token_budget = 200;
  plan = PlanIteration(running, params);
  EXPECT_EQ(plan.prompt_rows(), 200);
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[1].tokens, 20);  // the oldest first
  params.prefill_token_budget = 512;
  // Off: the share again, however long they waited.
  params.prefill_deadline_ms = 0;
  plan = PlanIteration(running, params);
  EXPECT_EQ(plan.prompt_rows(), 60);
  EXPECT_FALSE(plan.overdue_widened);
  params.prefill_deadline_ms = 1000;
  // Overdue tokens stop where a prefix snapshot is due, like any chunk.
  params.now = start + absl::Milliseconds(1500);
  running[4]->snapshot_at = 100;
  EXPECT_EQ(PlanIteration(running, params).prompt_rows(), 80);
  running[4]->snapshot_at = 0;
  // A younger prompt ahead of the overdue one in `running` (admitted first while the older one
  // waited for a prefix snapshot) does not take the overdue one's tokens.
  std::swap(running[4], running[5]);
  plan = PlanIteration(running, params);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].request, 5u);
  EXPECT_EQ(plan.chunks[0].tokens, 180);
  std::swap(running[4], running[5]);
  // A prompt that cannot be prefilled yet (its source still encoding) is not waiting on
  // prefill: the younger prompt, not yet overdue, gets the share of 5 sequences.
  running[4]->encoded = false;
  plan = PlanIteration(running, params);
  EXPECT_EQ(plan.prompt_rows(), 50);
  EXPECT_FALSE(plan.overdue_widened);
}

}  // namespace
}  // namespace executor_internal
}  // namespace abcd
