// abcd-server start-up flags that must be refused (the real binary, a message naming the flag;
// exit code 2 before any model loads).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/server_suite.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::ExpectRefused;
using testing::ExpectRefusedStart;
using testing::kLmDir;
using testing::kMtDir;
using testing::Started;
using testing::StartServer;

// A start-up on `models` that must be refused (exit 2) with a log holding `message`.
void ExpectModelsRefused(const std::string& models, const std::string& message) {
  SCOPED_TRACE(models);
  ExpectRefusedStart({"--models", models, "--device", "cpu"}, 2, message);
}

// Issue 19 item 17: the same directory twice was accepted (two copies, one unreachable).
TEST(ServerFlags, SameModelDirectoryTwiceIsRefusedNamingTheFlag) {
  const std::string lm = kLmDir;
  ExpectModelsRefused(lm + "," + kMtDir + "," + lm,
                      "--models names the directory \"" + lm + "\" twice");
  const std::string canonical = std::filesystem::canonical(lm).string();
  for (const std::string& other :
       {lm + "/", std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/../checkpoints/"
                                                 "abc-lm-untrained"}) {
    ExpectModelsRefused(lm + "," + other, "--models names the directory " + canonical +
                                              " twice (as \"" + lm + "\" and \"" + other + "\")");
  }
  // A symlink to the directory is the same directory.
  const std::filesystem::path link =
      std::filesystem::path(::testing::TempDir()) / "abcd-flags-test-lm-link";
  std::filesystem::remove(link);
  std::filesystem::create_directory_symlink(lm, link);
  ExpectModelsRefused(lm + "," + link.string(),
                      "--models names the directory " + canonical + " twice");
  std::filesystem::remove(link);
}

// --cpu_compute: a bad value names the flag. bf16 needs a CPU with AVX512_BF16 (refused
// naming it elsewhere) and bf16 weights: the bundled models are bf16 checkpoints and then report
// bf16 products; kept as f32 (--weight_format f32) they are refused naming the fix.
TEST(ServerFlags, CpuComputeIsCheckedNamingTheFlag) {
  ExpectRefusedStart({"--cpu_compute", "fp64"}, 2,
                     "--cpu_compute must be auto, fp32, bf16 or int8");
  const auto bf16 = StartServer({"--cpu_compute", "bf16", "--device", "cpu"});
  if (!bf16->started()) {
    ExpectRefused(*bf16, 2, "--cpu_compute bf16 needs a CPU with AVX-512 BF16");
    return;
  }
  EXPECT_NE(bf16->Log().find("bf16 kernels, bf16 products"), std::string::npos) << bf16->Log();
  const std::string log = ExpectRefusedStart(
      {"--cpu_compute", "bf16", "--weight_format", "f32", "--device", "cpu"}, testing::kNonZeroExit,
      "--cpu_compute bf16 multiplies bf16 weights, and model ");
  EXPECT_NE(log.find("keeps f32 (add --weight_format bf16)"), std::string::npos) << log;
}

// --cpu_compute auto, the default: the bundled bf16 models get bf16 products where the CPU has
// AVX512_BF16 (exact products elsewhere); --cpu_compute fp32 keeps them exact.
TEST(ServerFlags, CpuComputeAutoIsTheDefaultAndFp32KeepsExactProducts) {
  const auto by_default = StartServer({"--device", "cpu"});
  ASSERT_TRUE(Started(*by_default));
  const bool products = by_default->Log().find("bf16 kernels, bf16 products") != std::string::npos;
  EXPECT_TRUE(by_default->Log().find("bf16 kernels") != std::string::npos) << by_default->Log();
  const auto exact = StartServer({"--cpu_compute", "fp32", "--device", "cpu"});
  ASSERT_TRUE(Started(*exact));
  EXPECT_EQ(exact->Log().find("bf16 products"), std::string::npos) << exact->Log();
  const auto forced = StartServer({"--cpu_compute", "bf16", "--device", "cpu"});
  // Where bf16 may be forced, auto chose it; where it is refused, auto fell back to exact.
  EXPECT_EQ(forced->started(), products) << by_default->Log() << forced->Log();
}

// W8A8: int8 weights times 8-bit activations, on AVX-512 VNNI CPUs only.
TEST(ServerFlags, CpuComputeInt8NeedsInt8WeightsAndVnni) {
  const auto int8 =
      StartServer({"--cpu_compute", "int8", "--weight_format", "int8", "--device", "cpu"});
  if (!int8->started()) {
    ExpectRefused(*int8, 2, "--cpu_compute int8 needs a CPU with AVX-512 VNNI");
    return;
  }
  EXPECT_NE(int8->Log().find("int8 kernels, 8-bit activations"), std::string::npos) << int8->Log();
  const std::string log =
      ExpectRefusedStart({"--cpu_compute", "int8", "--device", "cpu"}, testing::kNonZeroExit,
                         "--cpu_compute int8 multiplies int8 weights, and model ");
  EXPECT_NE(log.find("(add --weight_format int8)"), std::string::npos) << log;
}

}  // namespace
}  // namespace abcd
