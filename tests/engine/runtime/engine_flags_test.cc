// The CPU-compute flag (engine/runtime/engine_flags.h): which values are accepted, and what each
// resolves to for each weight format on this CPU (the expectations follow what the CPU has, so
// both branches of the auto rule are pinned on one machine or the other).
#include "engine/runtime/engine_flags.h"

#include <gtest/gtest.h>

#include <string>

#include "engine/ops/cpu_context.h"
#include "engine/ops/matmul.h"
#include "engine/ops/packed_matrix.h"

namespace abcd {
namespace {

using cpu::LinearProducts;

absl::StatusOr<LinearProducts> Resolve(const std::string& value, WeightFormat weights) {
  return ResolveCpuCompute(value, weights, "--cpu_compute", "abc-lm", "--weight_format");
}

TEST(CpuComputeFlag, DefaultIsAuto) { EXPECT_EQ(kDefaultCpuCompute, "auto"); }

TEST(CpuComputeFlag, CheckAcceptsTheValuesAndNamesTheFlag) {
  EXPECT_TRUE(CheckCpuComputeFlag("auto", "--cpu_compute").ok());
  EXPECT_TRUE(CheckCpuComputeFlag("fp32", "--cpu_compute").ok());
  EXPECT_EQ(CheckCpuComputeFlag("bf16", "--cpu_compute").ok(), cpu::Bf16ProductsSupported());
  EXPECT_EQ(CheckCpuComputeFlag("int8", "--cpu_compute").ok(), cpu::W8A8Supported());
  for (const char* bad : {"", "fp64", "AUTO", "bf16 ", "f32"}) {
    const absl::Status status = CheckCpuComputeFlag(bad, "--cpu-compute");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(status.message()).find("--cpu-compute must be auto, fp32, bf16 or int8"),
              std::string::npos)
        << status;
  }
}

TEST(CpuComputeFlag, AutoMultipliesBf16WeightsInBf16AndEverythingElseExactly) {
  for (WeightFormat weights : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kInt8}) {
    auto products = Resolve("auto", weights);
    ASSERT_TRUE(products.ok()) << products.status();
    EXPECT_EQ(*products, LinearProducts::kFloat32) << WeightFormatName(weights);
  }
  auto bf16 = Resolve("auto", WeightFormat::kBF16);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(*bf16, cpu::Bf16ProductsSupported() ? LinearProducts::kBf16 : LinearProducts::kFloat32);
}

TEST(CpuComputeFlag, Fp32IsExactForEveryFormat) {
  for (WeightFormat weights :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8}) {
    auto products = Resolve("fp32", weights);
    ASSERT_TRUE(products.ok()) << products.status();
    EXPECT_EQ(*products, LinearProducts::kFloat32) << WeightFormatName(weights);
  }
}

TEST(CpuComputeFlag, Bf16AndInt8ForceTheirProductsOrAreRefusedNamingTheFix) {
  auto bf16 = Resolve("bf16", WeightFormat::kBF16);
  auto int8 = Resolve("int8", WeightFormat::kInt8);
  if (cpu::Bf16ProductsSupported()) {
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_EQ(*bf16, LinearProducts::kBf16);
    const absl::Status f32 = Resolve("bf16", WeightFormat::kF32).status();
    EXPECT_EQ(f32.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(f32.message(),
              "--cpu_compute bf16 multiplies bf16 weights, and model abc-lm keeps f32 (add "
              "--weight_format bf16)");
    const absl::Status unnamed =
        ResolveCpuCompute("bf16", WeightFormat::kInt8, "--cpu-compute", "", "--weight-format")
            .status();
    EXPECT_EQ(unnamed.message(),
              "--cpu-compute bf16 multiplies bf16 weights, and this model keeps int8 (add "
              "--weight-format bf16)");
  } else {
    EXPECT_NE(std::string(bf16.status().message()).find("--cpu_compute bf16 needs a CPU"),
              std::string::npos)
        << bf16.status();
  }
  if (cpu::W8A8Supported()) {
    ASSERT_TRUE(int8.ok()) << int8.status();
    EXPECT_EQ(*int8, LinearProducts::kInt8);
    const absl::Status bf16_weights = Resolve("int8", WeightFormat::kBF16).status();
    EXPECT_EQ(bf16_weights.message(),
              "--cpu_compute int8 multiplies int8 weights, and model abc-lm keeps bf16 (add "
              "--weight_format int8)");
  } else {
    EXPECT_NE(std::string(int8.status().message()).find("--cpu_compute int8 needs a CPU"),
              std::string::npos)
        << int8.status();
  }
}

}  // namespace
}  // namespace abcd
