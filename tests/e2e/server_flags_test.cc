// abcd-server start-up flags that must be refused before any model loads (the real binary,
// exit code 2 and a message naming the flag).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/binaries_under_test.h"
#include "tests/e2e/server_process.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::ServerProcess;

using testing::kLmDir;
using testing::kMtDir;

std::string Refusal(const std::string& models) {
  ServerProcess server(testing::ServerBinary(), {"--models", models, "--device", "cpu"});
  EXPECT_FALSE(server.started()) << models;
  EXPECT_EQ(server.WaitForExit(10), 2) << models << "\n" << server.Log();
  return server.Log();
}

// Issue 19 item 17: the same directory twice was accepted (two copies, one unreachable).
TEST(ServerFlags, SameModelDirectoryTwiceIsRefusedNamingTheFlag) {
  const std::string lm = kLmDir;
  EXPECT_NE(Refusal(lm + "," + kMtDir + "," + lm)
                .find("--models names the directory \"" + lm + "\" twice"),
            std::string::npos);
  const std::string canonical = std::filesystem::canonical(lm).string();
  for (const std::string& other :
       {lm + "/", std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/../checkpoints/"
                                                 "abc-lm-untrained"}) {
    const std::string log = Refusal(lm + "," + other);
    EXPECT_NE(log.find("--models names the directory " + canonical + " twice (as \"" + lm +
                       "\" and \"" + other + "\")"),
              std::string::npos)
        << log;
  }
  // A symlink to the directory is the same directory.
  const std::filesystem::path link =
      std::filesystem::path(::testing::TempDir()) / "abcd-flags-test-lm-link";
  std::filesystem::remove(link);
  std::filesystem::create_directory_symlink(lm, link);
  const std::string log = Refusal(lm + "," + link.string());
  std::filesystem::remove(link);
  EXPECT_NE(log.find("--models names the directory " + canonical + " twice"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace abcd
