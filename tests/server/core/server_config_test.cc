// abcd-server's flag parsing (server/core/server_config.h): the prefill deadline and warm-up
// flags' defaults, accepted values and refusals naming the flag.
#include "server/core/server_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace abcd {
namespace {

absl::StatusOr<ServerConfig> ParseDeadlineFlag(const std::vector<std::string>& args) {
  return ParseServerConfig(args, {"models/checkpoints/abc-lm"});
}

TEST(ServerConfigFlags, PrefillDeadlineDefaultsOnAndZeroTurnsItOff) {
  absl::StatusOr<ServerConfig> config = ParseDeadlineFlag({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prefill_deadline_ms, 1000);
  config = ParseDeadlineFlag({"--prefill_deadline_ms", "250.5"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prefill_deadline_ms, 250.5);
  config = ParseDeadlineFlag({"--prefill_deadline_ms=0"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->prefill_deadline_ms, 0);
  EXPECT_TRUE(absl::StrContains(ServerUsage(), "[--prefill_deadline_ms MS]"));
}

TEST(ServerConfigFlags, BadPrefillDeadlineIsRefusedNamingTheFlag) {
  for (const std::string bad : {"-1", "1000001", "nan", "soon"}) {
    const absl::StatusOr<ServerConfig> config = ParseDeadlineFlag({"--prefill_deadline_ms", bad});
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StartsWith(config.status().message(), "--prefill_deadline_ms must be"))
        << config.status();
  }
}

TEST(ServerConfigFlags, WarmupDefaultsToTheTokenBudgetAndZeroTurnsItOff) {
  absl::StatusOr<ServerConfig> config = ParseDeadlineFlag({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->warmup_tokens, -1);  // the prefill token budget
  config = ParseDeadlineFlag({"--warmup_tokens", "0"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->warmup_tokens, 0);
  config = ParseDeadlineFlag({"--warmup_tokens=-2"});
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::StrContains(config.status().message(), "--warmup_tokens")) << config.status();
  EXPECT_TRUE(absl::StrContains(ServerUsage(), "[--warmup_tokens N]"));
}

}  // namespace
}  // namespace abcd
