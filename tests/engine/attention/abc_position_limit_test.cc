// abc position control (causal Linformer) has no table column beyond max_positions: the
// Executor refuses a request whose prompt plus max_tokens would pass it, with INVALID_ARGUMENT
// naming max_tokens, and serves one that fits exactly.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/fixtures.h"

namespace abcd {
namespace {

TEST(AbcPositionLimit, ExecutorRefusesPromptPlusMaxTokensBeyondMaxPositions) {
  auto model = Model::Load(testing::FixtureDir("dec_abc_position"));
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ((*model)->config().max_positions(), 64);
  // The fixture has no tokenizer; any SentencePiece model serves token-id prompts.
  auto tokenizer = Tokenizer::Load(std::string(ABCD_FIXTURE_DIR) +
                                   "/../../models/checkpoints/abc-lm-untrained/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto executor = Executor::Create(**model, **tokenizer, ExecutorOptions{});
  ASSERT_TRUE(executor.ok()) << executor.status();

  GenerationRequest request;
  request.prompt_token_ids = {5, 6, 7};  // bos + 3 = 4 positions
  request.max_tokens = 61;               // 65 > 64
  request.ignore_eos = true;
  auto refused = (*executor)->Enqueue(request, [](GenerationEvent) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("max_tokens", 0), 0u) << refused.status();
  EXPECT_NE(refused.status().message().find("max_positions (64)"), std::string::npos)
      << refused.status();

  request.max_tokens = 60;  // exactly 64 positions
  std::mutex mu;
  std::condition_variable done;
  bool finished = false;
  int generated = 0;
  auto id = (*executor)->Enqueue(request, [&](GenerationEvent event) {
    std::lock_guard<std::mutex> lock(mu);
    generated += static_cast<int>(event.token_ids.size());
    if (event.finished) {
      EXPECT_TRUE(event.status.ok()) << event.status;
      finished = true;
      done.notify_all();
    }
  });
  ASSERT_TRUE(id.ok()) << id.status();
  std::unique_lock<std::mutex> lock(mu);
  done.wait(lock, [&] { return finished; });
  EXPECT_EQ(generated, 60);
}

}  // namespace
}  // namespace abcd
