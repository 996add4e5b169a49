// Speculative decoding in the Executor on every decoder-only golden fixture (every attention
// type the engine serves as a language model) and the bundled abc-lm-untrained: greedy and
// seeded sampling give the same tokens, text, finish reasons and log-probabilities with
// speculation on and off; stop strings, max_tokens, EOS, n > 1, sessions and the prefix cache
// (a resent conversation restoring a speculative request's final state) behave alike; drafts are
// proposed and accepted (the observer's counters move). Plus the n-gram draft and its pacing.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "absl/strings/match.h"
#include "engine/ops/matmul.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/speculation.h"
#include "nlohmann/json.hpp"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"
#include "tests/testing/read_file.h"

namespace abcd {
namespace {

using testing::ChoiceOutput;
using testing::ChoiceOutputs;
using testing::Collector;
using testing::kLmDir;
using testing::SpeculationCounter;

std::vector<std::string> DecoderFixtures() {
  const nlohmann::json index = nlohmann::json::parse(
      testing::ReadFile(std::string(ABCD_FIXTURE_DIR) + "/golden/index.json"), nullptr, false);
  std::vector<std::string> dirs = {kLmDir};
  if (!index.is_array()) return dirs;
  for (const auto& name : index) {
    const std::string n = name.get<std::string>();
    if (!absl::StartsWith(n, "encdec_"))
      dirs.push_back(std::string(ABCD_FIXTURE_DIR) + "/golden/" + n);
  }
  return dirs;
}

class SpeculativeExecutorTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto model = Model::Load(GetParam());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    auto tokenizer = Tokenizer::Load(kLmDir + "/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer);
    ExecutorOptions options;
    options.model_name = "test-model";
    options.prefix_cache_bytes = 64 << 20;  // a resent conversation restores the final state
    auto plain = Executor::Create(*model_, *tokenizer_, options);
    ASSERT_TRUE(plain.ok()) << plain.status();
    plain_ = std::move(*plain);
    // Verify runs of up to 17 rows: softmax reads prompt runs that long in blocks, verify runs
    // row by row (StateRef::verify).
    options.speculative = {SpeculativeMode::kNgram, kMaxSpeculativeTokens};
    options.observer = &counter_;
    auto spec = Executor::Create(*model_, *tokenizer_, options);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = std::move(*spec);
  }

  // A prompt that repeats a phrase (below the model's vocabulary), so drafts are found.
  std::vector<int32_t> Prompt() const {
    const int vocab = std::min(model_->config().vocab_size, 90);
    std::vector<int32_t> ids;
    // abc position layers have no column past max_positions (64 in the fixture).
    const int reps = model_->config().max_positions() > 0 ? 2 : 4;
    for (int rep = 0; rep < reps; ++rep) {
      for (int i = 0; i < 7; ++i) ids.push_back(4 + (i * 11 + 3) % (vocab - 4));
    }
    return ids;
  }
  GenerationRequest Request(int max_tokens, float temperature) const {
    GenerationRequest request;
    request.prompt_token_ids = Prompt();
    request.max_tokens = max_tokens;
    request.sampling.temperature = temperature;
    request.sampling.seed = 11;
    request.ignore_eos = true;
    return request;
  }
  static std::vector<ChoiceOutput> Run(Executor& executor, GenerationRequest request) {
    const int n = request.n;
    Collector collector;
    absl::StatusOr<RequestId> id = executor.Enqueue(std::move(request), collector.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    return ChoiceOutputs(collector.Wait(), n);
  }
  // The request on both executors: the same output.
  std::vector<ChoiceOutput> ExpectSame(const GenerationRequest& request) {
    const std::vector<ChoiceOutput> plain = Run(*plain_, request);
    const std::vector<ChoiceOutput> spec = Run(*spec_, request);
    EXPECT_EQ(plain.size(), spec.size());
    for (size_t i = 0; i < std::min(plain.size(), spec.size()); ++i) {
      SCOPED_TRACE(::testing::Message() << "choice " << i);
      EXPECT_TRUE(spec[i].status.ok()) << spec[i].status;
      EXPECT_EQ(spec[i].tokens, plain[i].tokens);
      EXPECT_EQ(spec[i].text, plain[i].text);
      EXPECT_EQ(spec[i].reason, plain[i].reason);
      EXPECT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
      for (size_t t = 0; t < std::min(plain[i].logprobs.size(), spec[i].logprobs.size()); ++t) {
        EXPECT_NEAR(spec[i].logprobs[t], plain[i].logprobs[t], 1e-4) << "token " << t;
      }
    }
    return plain;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  SpeculationCounter counter_;
  std::unique_ptr<Executor> plain_, spec_;
};

TEST_P(SpeculativeExecutorTest, GreedyAndSeededSamplingAreIdenticalOnAndOff) {
  GenerationRequest greedy = Request(40, 0.0f);
  greedy.logprobs = 2;
  ExpectSame(greedy);
  ExpectSame(Request(40, 0.9f));
  GenerationRequest eos = Request(40, 0.0f);  // EOS (if the model samples it) ends both alike
  eos.ignore_eos = false;
  ExpectSame(eos);
  eos.sampling.temperature = 1.0f;
  ExpectSame(eos);
  GenerationRequest penalised = Request(24, 0.7f);
  penalised.sampling.repetition_penalty = 1.3f;
  penalised.sampling.presence_penalty = 0.5f;
  ExpectSame(penalised);
  GenerationRequest two = Request(24, 1.0f);
  two.n = 2;
  ExpectSame(two);
  EXPECT_GT(counter_.drafted_.load(), 0) << "no draft was ever verified";
  std::printf("%s: %lld of %lld drafted tokens accepted\n", GetParam().c_str(),
              static_cast<long long>(counter_.accepted_.load()),
              static_cast<long long>(counter_.drafted_.load()));
}

TEST_P(SpeculativeExecutorTest, StopsMaxTokensAndSessionsBehaveAsWithout) {
  const std::vector<ChoiceOutput> reference = ExpectSame(Request(32, 0.0f));
  ASSERT_EQ(reference.size(), 1u);
  // A stop string that first appears somewhere inside the output: both cut there.
  const std::string& text = reference[0].text;
  if (text.size() > 8) {
    GenerationRequest stopped = Request(32, 0.0f);
    stopped.stop = {text.substr(text.size() / 2, 3)};
    ExpectSame(stopped);
  }
  for (int max_tokens : {1, 2, 3, 5, 7}) ExpectSame(Request(max_tokens, 0.0f));
  // A saved session continues identically: its state ends where its tokens do, also when a stop
  // string inside a verified draft ended it (the state goes back to that token).
  std::vector<GenerationRequest> firsts = {Request(13, 0.0f)};
  for (size_t at : {text.size() / 3, text.size() / 2, 2 * text.size() / 3}) {
    if (text.size() <= 8) break;
    firsts.push_back(Request(32, 0.0f));
    firsts.back().stop = {text.substr(at, 3)};
  }
  for (GenerationRequest& first : firsts) {
    first.save_state = true;
    const std::vector<ChoiceOutput> plain_first = Run(*plain_, first);
    const std::vector<ChoiceOutput> spec_first = Run(*spec_, first);
    ASSERT_EQ(spec_first.size(), 1u);
    ASSERT_FALSE(spec_first[0].saved_state.empty());
    EXPECT_EQ(spec_first[0].tokens, plain_first[0].tokens);
    EXPECT_EQ(spec_first[0].reason, plain_first[0].reason);
    for (const std::string& blob : {plain_first[0].saved_state, spec_first[0].saved_state}) {
      GenerationRequest next = Request(20, 0.0f);
      next.prompt_token_ids = {5, 6, 7};
      next.resume_state = blob;
      const std::vector<ChoiceOutput> plain = Run(*plain_, next);
      const std::vector<ChoiceOutput> spec = Run(*spec_, next);
      ASSERT_EQ(plain.size(), 1u);
      ASSERT_EQ(spec.size(), 1u);
      EXPECT_TRUE(plain[0].status.ok()) << plain[0].status;
      EXPECT_EQ(spec[0].tokens, plain[0].tokens);
      EXPECT_EQ(spec[0].text, plain[0].text);
    }
  }
}

// The prefix cache keeps a finished request's final state; a client resending the conversation
// (prompt + output + more) restores it. After a speculative request that state must be the one
// its tokens give (rolled back to the last kept row), so the continuation matches.
TEST_P(SpeculativeExecutorTest, ResentConversationContinuesFromTheCachedFinalState) {
  const GenerationRequest first = Request(12, 0.0f);
  const std::vector<ChoiceOutput> plain_first = Run(*plain_, first);
  const std::vector<ChoiceOutput> spec_first = Run(*spec_, first);
  ASSERT_EQ(spec_first.size(), 1u);
  ASSERT_EQ(spec_first[0].tokens, plain_first[0].tokens);
  GenerationRequest resent = Request(16, 0.0f);
  resent.prompt_token_ids.insert(resent.prompt_token_ids.end(), spec_first[0].tokens.begin(),
                                 spec_first[0].tokens.end());
  resent.prompt_token_ids.push_back(5);
  Collector plain_events, spec_events;
  ASSERT_TRUE(plain_->Enqueue(resent, plain_events.Callback()).ok());
  ASSERT_TRUE(spec_->Enqueue(resent, spec_events.Callback()).ok());
  const std::vector<GenerationEvent> plain = plain_events.Wait();
  const std::vector<GenerationEvent> spec = spec_events.Wait();
  // Beyond the first prompt (whose own snapshot ends before its last token): the final state.
  EXPECT_GT(spec.back().cached_prompt_tokens, static_cast<int>(first.prompt_token_ids.size()) + 1)
      << "the final state was not reused";
  EXPECT_EQ(ChoiceOutputs(spec, 1)[0].tokens, ChoiceOutputs(plain, 1)[0].tokens);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeExecutorTest, ::testing::ValuesIn(DecoderFixtures()),
                         [](const auto& param_info) {
                           const std::string& dir = param_info.param;
                           std::string name = dir.substr(dir.rfind('/') + 1);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// With bf16 products (--cpu_compute bf16) a row's outputs are still the same bits whatever
// the batch, so speculation leaves greedy and seeded tokens unchanged there too.
TEST(SpeculativeBf16Products, GreedyAndSeededTokensAreIdenticalOnAndOff) {
  if (!cpu::Bf16ProductsSupported()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  ModelLoadOptions load;
  load.weight_format = WeightFormat::kBF16;
  auto model = Model::Load(kLmDir, load);
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = Tokenizer::Load(kLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ExecutorOptions options;
  options.cpu_products = cpu::LinearProducts::kBf16;
  auto plain = Executor::Create(**model, **tokenizer, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  SpeculationCounter counter;
  options.speculative = {SpeculativeMode::kNgram, 4};
  options.observer = &counter;
  auto spec = Executor::Create(**model, **tokenizer, options);
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (float temperature : {0.0f, 0.8f}) {
    GenerationRequest request;
    request.prompt = "Open file. Save file. Open file. Save file. Open file.";
    request.max_tokens = 40;
    request.sampling.temperature = temperature;
    request.sampling.seed = 5;
    request.ignore_eos = true;
    std::vector<std::vector<int32_t>> tokens;
    for (Executor* executor : {plain->get(), spec->get()}) {
      Collector collector;
      ASSERT_TRUE(executor->Enqueue(request, collector.Callback()).ok());
      const std::vector<ChoiceOutput> out = ChoiceOutputs(collector.Wait(), 1);
      ASSERT_EQ(out.size(), 1u);
      tokens.push_back(out[0].tokens);
    }
    EXPECT_EQ(tokens[1], tokens[0]) << "temperature " << temperature;
  }
  EXPECT_GT(counter.accepted_.load(), 0);
}

TEST(NgramDraft, LatestEarlierOccurrenceOfTheLongestSuffix) {
  // Suffix [1 2 3] occurred at 0 and 5; the latest (5) is followed by 9 8.
  const std::vector<int32_t> context = {1, 2, 3, 4, 0, 1, 2, 3, 9, 8, 1, 2, 3};
  EXPECT_EQ(ProposeNgramDraft(context, 2), (std::vector<int32_t>{9, 8}));
  // Only 5 tokens follow it: the earlier occurrence (0), followed by 8, gives the draft.
  EXPECT_EQ(ProposeNgramDraft(context, 8), (std::vector<int32_t>{4, 0, 1, 2, 3, 9, 8, 1}));
  EXPECT_EQ(ProposeNgramDraft(context, 5), (std::vector<int32_t>{9, 8, 1, 2, 3}));
  // No trigram match: the bigram [5 6] does (k / 2 tokens), else the unigram (one token).
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{5, 6, 7, 9, 8, 5, 6}, 4),
            (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{5, 6, 7, 9, 5, 6}, 1),
            (std::vector<int32_t>{7}));
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{4, 7, 1, 9, 4}, 4), (std::vector<int32_t>{7}));
  // Nothing repeats, or nothing to draft.
  EXPECT_TRUE(ProposeNgramDraft(std::vector<int32_t>{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(ProposeNgramDraft(std::vector<int32_t>{1}, 4).empty());
  EXPECT_TRUE(ProposeNgramDraft(std::vector<int32_t>{1, 1}, 0).empty());
  // A run of one token: the latest match is followed by one token, an earlier one by more.
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{7, 7, 7, 7, 7}, 4),
            (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{7, 7, 7, 7, 7, 7, 7, 7}, 4),
            (std::vector<int32_t>{7, 7, 7, 7}));
  // The latest occurrence wins when it has enough tokens after it: [1 2 3] at 4 (then 5 6),
  // not at 0 (then 8 8).
  EXPECT_EQ(ProposeNgramDraft(std::vector<int32_t>{1, 2, 3, 8, 1, 2, 3, 5, 6, 1, 2, 3}, 2),
            (std::vector<int32_t>{5, 6}));
}

TEST(DraftPacer, BacksOffWhenNothingIsAccepted) {
  DraftPacer pacer(8);
  EXPECT_EQ(pacer.Budget(), 8);
  pacer.Observe(8, 2);
  EXPECT_EQ(pacer.Budget(), 8);
  pacer.Observe(8, 0);  // first miss: one plain step
  EXPECT_EQ(pacer.Budget(), 0);
  pacer.Observe(0, 0);
  EXPECT_EQ(pacer.Budget(), 8);
  pacer.Observe(3, 0);  // second miss in a row: three plain steps
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pacer.Budget(), 0);
    pacer.Observe(0, 0);
  }
  EXPECT_EQ(pacer.Budget(), 8);
  for (int miss = 0; miss < 20; ++miss) {  // at most kMaxSkip plain steps
    pacer.Observe(1, 0);
    int plain = 0;
    for (; pacer.Budget() == 0; ++plain) pacer.Observe(0, 0);
    EXPECT_LE(plain, DraftPacer::kMaxSkip);
  }
  pacer.Observe(1, 1);  // an acceptance ends the back-off
  pacer.Observe(2, 0);
  EXPECT_EQ(pacer.Budget(), 0);
  pacer.Observe(0, 0);
  EXPECT_EQ(pacer.Budget(), 8);
  EXPECT_EQ(DraftPacer().Budget(), 0);
}

TEST(SpeculativeParams, FlagAndRangeErrorsNameTheField) {
  EXPECT_FALSE(ParseSpeculativeFlag("off", "--speculative")->enabled());
  EXPECT_EQ(ParseSpeculativeFlag("ngram", "--speculative")->k, 4);
  EXPECT_EQ(ParseSpeculativeFlag("ngram:16", "--speculative")->k, 16);
  for (const char* bad : {"ngram:0", "ngram:17", "ngram:x", "lookahead", "ngram:"}) {
    absl::StatusOr<SpeculativeParams> parsed = ParseSpeculativeFlag(bad, "--speculative");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(parsed.status().message(), "--speculative")) << bad;
  }
  const absl::Status k = ValidateSpeculativeParams({SpeculativeMode::kNgram, 0}, "speculative");
  EXPECT_EQ(k.message(), "speculative.k must be in [1, 16], got 0");
}

}  // namespace
}  // namespace abcd
