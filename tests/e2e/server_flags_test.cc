// abcd-server start-up flags that must be refused (the real binary, a message naming the flag;
// exit code 2 before any model loads).
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

// --cpu_compute: a bad value names the flag. bf16 needs a CPU with AVX512_BF16 (refused
// naming it elsewhere) and bf16 weights: the bundled models are bf16 checkpoints and then report
// bf16 products; kept as f32 (--weight_format f32) they are refused naming the fix.
TEST(ServerFlags, CpuComputeIsCheckedNamingTheFlag) {
  ServerProcess bad(testing::ServerBinary(), {"--cpu_compute", "fp64"});
  EXPECT_FALSE(bad.started());
  EXPECT_EQ(bad.WaitForExit(10), 2);
  EXPECT_NE(bad.Log().find("--cpu_compute must be auto, fp32, bf16 or int8"), std::string::npos)
      << bad.Log();
  ServerProcess bf16(testing::ServerBinary(), {"--cpu_compute", "bf16", "--device", "cpu"});
  if (!bf16.started()) {
    EXPECT_EQ(bf16.WaitForExit(10), 2);
    EXPECT_NE(bf16.Log().find("--cpu_compute bf16 needs a CPU with AVX-512 BF16"),
              std::string::npos)
        << bf16.Log();
    return;
  }
  EXPECT_NE(bf16.Log().find("bf16 kernels, bf16 products"), std::string::npos) << bf16.Log();
  ServerProcess fp32_weights(testing::ServerBinary(), {"--cpu_compute", "bf16", "--weight_format",
                                                       "f32", "--device", "cpu"});
  EXPECT_FALSE(fp32_weights.started());
  EXPECT_NE(fp32_weights.WaitForExit(10), 0);
  EXPECT_NE(fp32_weights.Log().find("--cpu_compute bf16 multiplies bf16 weights, and model "),
            std::string::npos)
      << fp32_weights.Log();
  EXPECT_NE(fp32_weights.Log().find("keeps f32 (add --weight_format bf16)"), std::string::npos)
      << fp32_weights.Log();
}

// --cpu_compute auto, the default: the bundled bf16 models get bf16 products where the CPU has
// AVX512_BF16 (exact products elsewhere); --cpu_compute fp32 keeps them exact.
TEST(ServerFlags, CpuComputeAutoIsTheDefaultAndFp32KeepsExactProducts) {
  ServerProcess by_default(testing::ServerBinary(), {"--device", "cpu"});
  ASSERT_TRUE(by_default.started()) << by_default.Log();
  const bool products = by_default.Log().find("bf16 kernels, bf16 products") != std::string::npos;
  EXPECT_TRUE(by_default.Log().find("bf16 kernels") != std::string::npos) << by_default.Log();
  ServerProcess exact(testing::ServerBinary(), {"--cpu_compute", "fp32", "--device", "cpu"});
  ASSERT_TRUE(exact.started()) << exact.Log();
  EXPECT_EQ(exact.Log().find("bf16 products"), std::string::npos) << exact.Log();
  ServerProcess forced(testing::ServerBinary(), {"--cpu_compute", "bf16", "--device", "cpu"});
  // Where bf16 may be forced, auto chose it; where it is refused, auto fell back to exact.
  EXPECT_EQ(forced.started(), products) << by_default.Log() << forced.Log();
}

// W8A8: int8 weights times 8-bit activations, on AVX-512 VNNI CPUs only.
TEST(ServerFlags, CpuComputeInt8NeedsInt8WeightsAndVnni) {
  ServerProcess int8(testing::ServerBinary(),
                     {"--cpu_compute", "int8", "--weight_format", "int8", "--device", "cpu"});
  if (!int8.started()) {
    EXPECT_EQ(int8.WaitForExit(10), 2);
    EXPECT_NE(int8.Log().find("--cpu_compute int8 needs a CPU with AVX-512 VNNI"),
              std::string::npos)
        << int8.Log();
    return;
  }
  EXPECT_NE(int8.Log().find("int8 kernels, 8-bit activations"), std::string::npos) << int8.Log();
  ServerProcess bf16_weights(testing::ServerBinary(), {"--cpu_compute", "int8", "--device", "cpu"});
  EXPECT_FALSE(bf16_weights.started());
  EXPECT_NE(bf16_weights.WaitForExit(10), 0);
  EXPECT_NE(bf16_weights.Log().find("--cpu_compute int8 multiplies int8 weights, and model "),
            std::string::npos)
      << bf16_weights.Log();
  EXPECT_NE(bf16_weights.Log().find("(add --weight_format int8)"), std::string::npos)
      << bf16_weights.Log();
}

}  // namespace
}  // namespace abcd
