// The Executor's sequence-state features: token-id prompts, sessions (a continuation equals one
// fresh request over the whole history, greedy and seeded), n choices from one prefill (choice i
// equals the n = 1 request with seed + i) and the prefix cache (identical outputs, only the
// unshared suffix prefilled). Run on the bundled abc-lm-untrained, on the dec_mixed golden
// fixture (an abc layer and a softmax layer, so KV caches travel through snapshots too), on
// dec_txl (Transformer-XL rings) and on dec_softmax (KV caches only: snapshots cut back).
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/scheduler/executor.h"
#include "engine/state/sequence_blob.h"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

const std::string kMixedDir = std::string(ABCD_FIXTURE_DIR) + "/golden/dec_mixed";
// Transformer-XL (issue 16): post-LN, no absolute positions, rings of 7 and 10 keys (prompts and
// sessions here run far past them, so snapshots carry wrapped rings).
const std::string kTxlDir = std::string(ABCD_FIXTURE_DIR) + "/golden/dec_txl";
// Softmax layers only: prefix snapshots are cut from the state after the whole prompt
// (DecodeBackend::SnapshotAt) instead of stopping prefill at them.
const std::string kSoftmaxDir = std::string(ABCD_FIXTURE_DIR) + "/golden/dec_softmax";

using testing::Collector;
using testing::kLmDir;
using testing::Tokens;

class ExecutorStateTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto model = Model::Load(GetParam());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::Load(kLmDir + "/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
  }
  std::unique_ptr<Executor> Start(ExecutorOptions options = {}) {
    options.model_name = "test-model";
    auto executor = Executor::Create(*model_, *tokenizer_, options);
    EXPECT_TRUE(executor.ok()) << executor.status();
    return executor.ok() ? std::move(*executor) : nullptr;
  }
  // Prompt ids below the model's vocabulary, varied by `salt`.
  std::vector<int32_t> Prompt(int length, int salt) const {
    std::vector<int32_t> ids;
    const int vocab = model_->config().vocab_size;
    for (int i = 0; i < length; ++i) ids.push_back(4 + (i * 7 + salt * 13) % (vocab - 4));
    return ids;
  }
  static GenerationRequest Request(std::vector<int32_t> ids, int max_tokens, float temperature,
                                   uint64_t seed) {
    GenerationRequest request;
    request.prompt_token_ids = std::move(ids);
    request.max_tokens = max_tokens;
    request.sampling.temperature = temperature;
    request.sampling.seed = seed;
    request.ignore_eos = true;
    return request;
  }
  static std::vector<GenerationEvent> Run(Executor& executor, GenerationRequest request) {
    Collector collector;
    absl::StatusOr<RequestId> id = executor.Enqueue(std::move(request), collector.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    return collector.Wait();
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(ExecutorStateTest, TokenIdPromptEqualsTextPrompt) {
  if (GetParam() != kLmDir) GTEST_SKIP() << "needs the tokenizer's own model";
  auto executor = Start();
  GenerationRequest text = Request({}, 12, 0.0f, 0);
  text.prompt = "This program is free software";
  const auto by_text = Run(*executor, text);
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text.prompt);
  ASSERT_TRUE(ids.ok());
  const auto by_ids = Run(*executor, Request(*ids, 12, 0.0f, 0));
  ASSERT_TRUE(by_ids.back().status.ok()) << by_ids.back().status;
  EXPECT_EQ(Tokens(by_ids), Tokens(by_text));
  EXPECT_EQ(by_ids.back().prompt_tokens, by_text.back().prompt_tokens);

  GenerationRequest bad = Request({4, model_->config().vocab_size}, 4, 0.0f, 0);
  Collector unused;
  absl::StatusOr<RequestId> refused = executor->Enqueue(bad, unused.Callback());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("prompt_token_ids[1]"), std::string::npos);
  bad = Request({4, 5}, 4, 0.0f, 0);
  bad.prompt = "both";
  EXPECT_EQ(executor->Enqueue(bad, unused.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Four turns through saved states equal, turn by turn, one fresh request whose prompt is the
// whole history so far (every prompt and generated token).
TEST_P(ExecutorStateTest, SessionTurnsEqualFreshRequestsOverTheHistory) {
  auto executor = Start();
  for (const float temperature : {0.0f, 0.9f}) {
    std::string state;
    std::vector<int32_t> history;  // without bos: what a fresh request's prompt is
    for (int turn = 0; turn < 4; ++turn) {
      const std::vector<int32_t> prompt = Prompt(5 + turn, turn);
      GenerationRequest request = Request(prompt, 6, temperature, 100 + turn);
      request.resume_state = state;
      request.save_state = true;
      const auto events = Run(*executor, request);
      ASSERT_TRUE(events.back().status.ok()) << events.back().status;
      // Only this turn's prompt counts (and bos on the first).
      EXPECT_EQ(events.back().prompt_tokens, static_cast<int>(prompt.size()) + (turn == 0));
      history.insert(history.end(), prompt.begin(), prompt.end());
      const auto fresh = Run(*executor, Request(history, 6, temperature, 100 + turn));
      ASSERT_TRUE(fresh.back().status.ok());
      EXPECT_EQ(Tokens(events), Tokens(fresh)) << "turn " << turn << " t=" << temperature;
      const std::vector<int32_t> generated = Tokens(events);
      history.insert(history.end(), generated.begin(), generated.end());
      state = events.back().saved_state;
      ASSERT_FALSE(state.empty());
      absl::StatusOr<SequenceBlobInfo> info = PeekSequenceBlob(state);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->model, "test-model");
      EXPECT_EQ(info->tokens, static_cast<int64_t>(history.size()) + 1);  // + bos
      EXPECT_EQ(events.back().session_tokens, info->tokens);
      // The last sampled token is kept with the state, not yet folded.
      EXPECT_EQ(info->folded, info->tokens - 1);
    }
  }
}

TEST_P(ExecutorStateTest, SessionBlobsAreCheckedAndFailedRequestsSaveNothing) {
  auto executor = Start();
  GenerationRequest first = Request(Prompt(6, 1), 4, 0.0f, 0);
  first.save_state = true;
  const std::string state = Run(*executor, first).back().saved_state;
  ASSERT_FALSE(state.empty());
  EXPECT_TRUE(executor->CheckSessionState(state).ok());

  // Another model's blob (same state format, other name): FAILED_PRECONDITION naming both.
  absl::StatusOr<SequenceBlob> blob = DecodeSequenceBlob(state);
  ASSERT_TRUE(blob.ok());
  blob->model = "other-model";
  const absl::Status foreign = executor->CheckSessionState(EncodeSequenceBlob(*blob));
  EXPECT_EQ(foreign.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(foreign.message().find("other-model"), std::string::npos) << foreign;
  EXPECT_NE(foreign.message().find("test-model"), std::string::npos) << foreign;
  GenerationRequest resume = Request(Prompt(3, 2), 4, 0.0f, 0);
  resume.resume_state = EncodeSequenceBlob(*blob);
  Collector unused;
  EXPECT_EQ(executor->Enqueue(resume, unused.Callback()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Corrupt and truncated: INVALID_ARGUMENT.
  std::string corrupt = state;
  corrupt[corrupt.size() / 2] ^= 0x40;
  EXPECT_EQ(executor->CheckSessionState(corrupt).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(executor->CheckSessionState(state.substr(0, state.size() - 3)).code(),
            absl::StatusCode::kInvalidArgument);

  // A cancelled request carries no state to save.
  GenerationRequest cancelled = Request(Prompt(6, 3), 4000, 0.0f, 0);
  cancelled.resume_state = state;
  cancelled.save_state = true;
  Collector collector;
  absl::StatusOr<RequestId> id = executor->Enqueue(cancelled, collector.Callback());
  ASSERT_TRUE(id.ok());
  executor->Cancel(*id);
  const auto events = collector.Wait();
  EXPECT_EQ(events.back().status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(events.back().saved_state.empty());

  // n > 1 with a session is refused, as are sessions on nothing to continue from.
  GenerationRequest two = Request(Prompt(3, 4), 4, 0.5f, 0);
  two.save_state = true;
  two.n = 2;
  EXPECT_EQ(executor->Enqueue(two, unused.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// n choices from one prefill: choice i is the n = 1 request with seed + i; the state is freed.
TEST_P(ExecutorStateTest, ChoicesEqualSeparateRequestsWithTheirSeeds) {
  auto executor = Start();
  const std::vector<int32_t> prompt = Prompt(9, 5);
  GenerationRequest request = Request(prompt, 7, 0.9f, 41);
  request.n = 3;
  const auto events = Run(*executor, request);
  ASSERT_TRUE(events.back().status.ok()) << events.back().status;
  int finished_choices = 0;
  for (const auto& e : events) finished_choices += e.choice_finished && !e.finished;
  EXPECT_EQ(finished_choices, 3);
  EXPECT_EQ(events.back().completion_tokens, 21);
  for (int i = 0; i < 3; ++i) {
    const auto alone = Run(*executor, Request(prompt, 7, 0.9f, 41 + i));
    EXPECT_EQ(Tokens(events, i), Tokens(alone)) << "choice " << i;
  }
  for (int i = 0; i < 200 && executor->LatestStats().state_bytes_in_use != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(executor->LatestStats().state_bytes_in_use, 0);

  GenerationRequest too_many = Request(prompt, 4, 0.9f, 0);
  too_many.n = 17;
  Collector unused;
  EXPECT_EQ(executor->Enqueue(too_many, unused.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The prefix cache changes nothing but the work: the same tokens with it on and off, and
// requests sharing a prefix prefill only what follows it.
TEST_P(ExecutorStateTest, PrefixCacheChangesOnlyThePrefill) {
  ExecutorOptions cached;
  cached.prefix_cache_bytes = int64_t{64} << 20;
  auto with_cache = Start(cached);
  auto without = Start();
  const std::vector<int32_t> prefix = Prompt(40, 7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = prefix;
    const std::vector<int32_t> suffix = Prompt(3 + i, 20 + i);
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    prompts.push_back(prompt);
  }
  prompts.push_back(prompts[2]);  // an identical prompt too
  // In flight together, so that later ones wait for the snapshot where they diverge.
  std::vector<Collector> collectors(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(
        with_cache->Enqueue(Request(prompts[i], 5, 0.0f, 0), collectors[i].Callback()).ok());
  }
  int cached_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto events = collectors[i].Wait();
    ASSERT_TRUE(events.back().status.ok()) << events.back().status;
    cached_tokens += events.back().cached_prompt_tokens;
    const auto reference = Run(*without, Request(prompts[i], 5, 0.0f, 0));
    EXPECT_EQ(Tokens(events), Tokens(reference)) << "prompt " << i;
  }
  // The first two prefill the shared prefix (the second stops where it diverges and stores
  // it); the rest restore it (41 tokens with bos), the identical one even more.
  EXPECT_GE(cached_tokens, 4 * 41);
  const ExecutorStats stats = with_cache->LatestStats();
  EXPECT_EQ(stats.prefix_cache_hit_tokens, cached_tokens);
  EXPECT_GT(stats.prefix_cache_entries, 0);
  EXPECT_GT(stats.prefix_cache_bytes, 0);
  EXPECT_EQ(without->LatestStats().prefix_cache_queried_tokens, 0);

  // Sequentially, a resent history hits the previous prompt's end (bos + the prompt but its
  // last token: the snapshot is taken before it, so that an exact repeat hits too).
  std::vector<int32_t> longer = prompts[0];
  longer.push_back(9);
  const auto events = Run(*with_cache, Request(longer, 5, 0.0f, 0));
  EXPECT_EQ(events.back().cached_prompt_tokens, static_cast<int>(prompts[0].size()));
  // An exact repeat restores all but the last token.
  const auto repeat = Run(*with_cache, Request(prompts[0], 5, 0.0f, 0));
  EXPECT_EQ(repeat.back().cached_prompt_tokens, static_cast<int>(prompts[0].size()));
  EXPECT_EQ(Tokens(events), Tokens(Run(*without, Request(longer, 5, 0.0f, 0))));
}

// The start-up warm-up feeds its rows through a scratch sequence it releases: the state pool is
// empty again and every output is what an executor without it gives.
TEST_P(ExecutorStateTest, WarmupChangesNoOutputAndHoldsNoState) {
  ExecutorOptions warmed;
  warmed.warmup_tokens = 24;
  warmed.prefix_cache_bytes = int64_t{64} << 20;
  auto with_warmup = Start(warmed);
  ExecutorOptions cold;
  cold.prefix_cache_bytes = int64_t{64} << 20;
  auto without = Start(cold);
  for (const auto& [temperature, seed] :
       {std::pair{0.0f, uint64_t{0}}, std::pair{0.8f, uint64_t{11}}}) {
    const auto events = Run(*with_warmup, Request(Prompt(30, 3), 6, temperature, seed));
    ASSERT_TRUE(events.back().status.ok()) << events.back().status;
    EXPECT_EQ(Tokens(events), Tokens(Run(*without, Request(Prompt(30, 3), 6, temperature, seed))))
        << "temperature " << temperature;
  }
  // The stats are published at the end of the iteration that delivered the last event.
  ExecutorStats stats = with_warmup->LatestStats();
  for (int i = 0; i < 2000 && stats.state_bytes_in_use != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
    stats = with_warmup->LatestStats();
  }
  EXPECT_EQ(stats.state_bytes_in_use, 0);
  EXPECT_EQ(stats.warmup_tokens, 24);
  EXPECT_EQ(stats.prefix_cache_queried_tokens, without->LatestStats().prefix_cache_queried_tokens);
  EXPECT_EQ(without->LatestStats().warmup_tokens, 0);
}

// Generated tokens carry their log-probability and the top alternatives; scoring the prompt
// plus those tokens (echo, max_tokens 0) gives the same numbers, however prefill is chunked.
TEST_P(ExecutorStateTest, LogprobsOfGeneratedAndPromptTokensAgree) {
  const std::vector<int32_t> prompt = Prompt(11, 9);
  std::vector<int32_t> scored = prompt;
  std::vector<TokenLogprobs> generated;
  {
    auto executor = Start();
    GenerationRequest request = Request(prompt, 6, 0.0f, 0);
    request.logprobs = 3;
    const auto events = Run(*executor, request);
    ASSERT_TRUE(events.back().status.ok()) << events.back().status;
    for (const auto& e : events) {
      ASSERT_EQ(e.logprobs.size(), e.token_ids.size());
      for (size_t i = 0; i < e.token_ids.size(); ++i) {
        const TokenLogprobs& lp = e.logprobs[i];
        EXPECT_EQ(lp.token, e.token_ids[i]);
        ASSERT_EQ(lp.top.size(), 3u);
        // Greedy: the token is the most likely one.
        EXPECT_EQ(lp.top[0].first, lp.token);
        EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
        EXPECT_GE(lp.top[0].second, lp.top[1].second);
        EXPECT_GE(lp.top[1].second, lp.top[2].second);
        EXPECT_LE(
            std::exp(lp.top[0].second) + std::exp(lp.top[1].second) + std::exp(lp.top[2].second),
            1.0 + 1e-5);
        generated.push_back(lp);
        scored.push_back(lp.token);
      }
    }
    ASSERT_EQ(generated.size(), 6u);
  }
  for (const int budget : {512, 5}) {
    ExecutorOptions options;
    options.prefill_token_budget = budget;
    options.prefill_policy = PrefillPolicy::kTokens;
    auto executor = Start(options);
    GenerationRequest echo = Request(scored, 0, 0.0f, 0);
    echo.prompt_logprobs = true;
    echo.logprobs = 2;
    const auto events = Run(*executor, echo);
    ASSERT_TRUE(events.back().status.ok()) << events.back().status;
    ASSERT_EQ(events.size(), 1u);
    EXPECT_TRUE(events[0].token_ids.empty());
    EXPECT_EQ(events[0].prompt_token_ids, scored);
    ASSERT_EQ(events[0].prompt_logprobs.size(), scored.size());
    for (size_t i = 0; i < generated.size(); ++i) {
      const TokenLogprobs& lp = events[0].prompt_logprobs[prompt.size() + i];
      EXPECT_EQ(lp.token, generated[i].token);
      EXPECT_NEAR(lp.logprob, generated[i].logprob, 1e-4) << "budget " << budget << " i " << i;
      EXPECT_EQ(lp.top.size(), 2u);
    }
  }
  auto executor = Start();
  GenerationRequest bad = Request(prompt, 4, 0.0f, 0);
  bad.logprobs = 21;
  Collector unused;
  EXPECT_EQ(executor->Enqueue(bad, unused.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = Request(prompt, 0, 0.0f, 0);  // max_tokens 0 only scores a prompt
  EXPECT_EQ(executor->Enqueue(bad, unused.Callback()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Models, ExecutorStateTest,
                         ::testing::Values(kLmDir, kMixedDir, kTxlDir, kSoftmaxDir),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           if (param.param == kTxlDir) return std::string("Txl");
                           if (param.param == kSoftmaxDir) return std::string("Softmax");
                           return param.param == kLmDir ? std::string("AbcLm")
                                                        : std::string("MixedSoftmax");
                         });

}  // namespace
}  // namespace abcd
