// The CUDA element-wise ops against their CPU twins (elementwise_cpu.cc, Model::Embed) on
// random inputs: shapes with d a multiple of 4 (float4 path) and not, one row and many.
#include "engine/ops/elementwise_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/ops/elementwise.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

struct MatrixShape {
  int64_t rows;
  int64_t d;
};

// rows 1 and 300; d a multiple of 4, d = 2 mod 4, odd, tiny, and wider than one block pass.
const MatrixShape kMatrixShapes[] = {{1, 512}, {300, 512}, {7, 130}, {300, 130}, {5, 67},
                                     {1, 1},   {3, 2},     {2, 4},   {4, 4100},  {1, 5001}};

std::string Name(const char* op, const MatrixShape& shape) {
  return absl::StrCat(op, "_rows", shape.rows, "_d", shape.d);
}

class ElementwiseCudaTest : public CudaTest {};

TEST_F(ElementwiseCudaTest, LayerNormMatchesCpu) {
  uint32_t seed = 1;
  for (const MatrixShape& shape : kMatrixShapes) {
    // An offset of 3 makes a one-pass E[x^2] - E[x]^2 variance visibly wrong.
    std::vector<float> x = RandomFloats(shape.rows * shape.d, seed++, 2.0f, 4.0f);
    const std::vector<float> gamma = RandomFloats(shape.d, seed++, 0.5f, 1.5f);
    const std::vector<float> beta = RandomFloats(shape.d, seed++, -0.5f, 0.5f);
    std::vector<float> expected(x.size());
    cpu::LayerNorm(x.data(), shape.rows, shape.d, gamma.data(), beta.data(), 1e-5f,
                   expected.data());

    DeviceArray<float> x_device = Upload(x);
    DeviceArray<float> gamma_device = Upload(gamma);
    DeviceArray<float> beta_device = Upload(beta);
    DeviceArray<float> y_device = Upload(std::vector<float>(x.size(), NAN));
    ASSERT_TRUE(LayerNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(),
                          beta_device.data(), 1e-5f, y_device.data())
                    .ok());
    ExpectClose(Download(y_device), expected, kKernelTolerance, Name("layer_norm", shape));

    // In place (x == y), as the header allows.
    ASSERT_TRUE(LayerNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(),
                          beta_device.data(), 1e-5f, x_device.data())
                    .ok());
    ExpectClose(Download(x_device), expected, kKernelTolerance, Name("layer_norm_in_place", shape));
  }
}

// d % 4 == 0 but the rows start one float past a 16-byte boundary: the scalar path must run.
TEST_F(ElementwiseCudaTest, LayerNormMisalignedRows) {
  const MatrixShape shape{9, 64};
  std::vector<float> x = RandomFloats(shape.rows * shape.d + 1, 11, -2.0f, 2.0f);
  const std::vector<float> gamma = RandomFloats(shape.d + 1, 12, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(shape.d + 1, 13, -0.5f, 0.5f);
  std::vector<float> expected(shape.rows * shape.d);
  cpu::LayerNorm(x.data() + 1, shape.rows, shape.d, gamma.data() + 1, beta.data() + 1, 1e-5f,
                 expected.data());
  DeviceArray<float> x_device = Upload(x);
  DeviceArray<float> gamma_device = Upload(gamma);
  DeviceArray<float> beta_device = Upload(beta);
  DeviceArray<float> y_device = Upload(std::vector<float>(x.size(), NAN));
  ASSERT_TRUE(LayerNorm(context(), x_device.data() + 1, shape.rows, shape.d,
                        gamma_device.data() + 1, beta_device.data() + 1, 1e-5f, y_device.data() + 1)
                  .ok());
  std::vector<float> y = Download(y_device);
  ASSERT_EQ(y.size(), x.size());
  EXPECT_TRUE(std::isnan(y[0])) << "wrote before the output";
  ExpectClose(std::vector<float>(y.begin() + 1, y.end()), expected, kKernelTolerance,
              "layer_norm_misaligned");
}

TEST_F(ElementwiseCudaTest, ActivateMatchesCpu) {
  uint32_t seed = 100;
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4099}, 300 * int64_t{512},
                          int64_t{3} << 20}) {
    for (const Activation activation : {Activation::kRelu, Activation::kGelu}) {
      std::vector<float> x = RandomFloats(n, seed++, -6.0f, 6.0f);
      DeviceArray<float> x_device = Upload(x);
      cpu::Activate(activation, x.data(), n);
      // kF32 in place, as the header allows.
      ASSERT_TRUE(ActivateRounded(context(), activation, x_device.data(), n, WeightType::kF32,
                                  x_device.data())
                      .ok());
      ExpectClose(Download(x_device), x, kKernelTolerance,
                  absl::StrCat(activation == Activation::kRelu ? "relu" : "gelu", "_n", n));
    }
  }
}

// The 16-bit outputs of the fused ops are the fp32 op's values rounded to nearest even: bit for
// bit what a separate rounding pass (RoundTo) would give.
TEST_F(ElementwiseCudaTest, RoundedOutputsAreTheFp32ResultsRounded) {
  uint32_t seed = 150;
  for (const WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    const std::string name = type == WeightType::kBF16 ? "bf16" : "fp16";
    for (const MatrixShape& shape : kMatrixShapes) {
      const int64_t n = shape.rows * shape.d;
      const std::vector<float> x = RandomFloats(n, seed++, 2.0f, 4.0f);
      const std::vector<float> gamma = RandomFloats(shape.d, seed++, 0.5f, 1.5f);
      const std::vector<float> beta = RandomFloats(shape.d, seed++, -0.5f, 0.5f);
      DeviceArray<float> x_device = Upload(x);
      DeviceArray<float> gamma_device = Upload(gamma);
      DeviceArray<float> beta_device = Upload(beta);
      DeviceArray<float> full = Upload(std::vector<float>(n, NAN));
      DeviceArray<uint16_t> half = Upload(std::vector<uint16_t>(n, 0xffff));
      ASSERT_TRUE(LayerNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(),
                            beta_device.data(), 1e-5f, full.data())
                      .ok());
      ASSERT_TRUE(LayerNormRounded(context(), x_device.data(), shape.rows, shape.d,
                                   gamma_device.data(), beta_device.data(), 1e-5f, type,
                                   half.data())
                      .ok());
      const std::vector<float> normed = Download(full);
      ExpectClose(Widened(Download(half), type), RoundedOnHost(normed, type), 0.0f,
                  Name(("layer_norm_" + name).c_str(), shape));

      ASSERT_TRUE(RoundTo(context(), full.data(), n, type, half.data()).ok());
      ExpectClose(Widened(Download(half), type), RoundedOnHost(normed, type), 0.0f,
                  Name(("round_" + name).c_str(), shape));

      for (const Activation activation : {Activation::kRelu, Activation::kGelu}) {
        ASSERT_TRUE(
            ActivateRounded(context(), activation, x_device.data(), n, type, half.data()).ok());
        DeviceArray<float> activated = Upload(x);
        ASSERT_TRUE(ActivateRounded(context(), activation, activated.data(), n, WeightType::kF32,
                                    activated.data())
                        .ok());
        ExpectClose(Widened(Download(half), type), RoundedOnHost(Download(activated), type), 0.0f,
                    Name(("activate_" + name).c_str(), shape));
      }
    }
  }
}

TEST_F(ElementwiseCudaTest, AddBiasMatchesCpu) {
  uint32_t seed = 300;
  // Includes more rows than one grid.y pass (65535) and a width over one grid.x pass.
  for (const MatrixShape& shape :
       {MatrixShape{1, 1}, MatrixShape{1, 512}, MatrixShape{300, 130}, MatrixShape{300, 3},
        MatrixShape{70000, 5}, MatrixShape{3, 300000}}) {
    std::vector<float> y = RandomFloats(shape.rows * shape.d, seed++);
    const std::vector<float> bias = RandomFloats(shape.d, seed++);
    DeviceArray<float> y_device = Upload(y);
    DeviceArray<float> bias_device = Upload(bias);
    for (int64_t r = 0; r < shape.rows; ++r) {
      for (int64_t c = 0; c < shape.d; ++c) y[r * shape.d + c] += bias[c];
    }
    ASSERT_TRUE(AddBias(context(), y_device.data(), shape.rows, shape.d, bias_device.data()).ok());
    ExpectClose(Download(y_device), y, kKernelTolerance, Name("add_bias", shape));
  }
}

// Repeated, reversed and out-of-order rows; more rows than one grid.y pass.
TEST_F(ElementwiseCudaTest, GatherRowsCopiesTheChosenRows) {
  uint32_t seed = 350;
  for (const MatrixShape& shape :
       {MatrixShape{1, 1}, MatrixShape{300, 130}, MatrixShape{70000, 5}, MatrixShape{4, 3000}}) {
    const std::vector<float> x = RandomFloats(shape.rows * shape.d, seed++);
    std::vector<int32_t> rows;
    for (int64_t i = 0; i < shape.rows + 3; ++i) {
      rows.push_back(
          static_cast<int32_t>((shape.rows - 1 - i * 7 % shape.rows + shape.rows) % shape.rows));
    }
    const int64_t count = static_cast<int64_t>(rows.size());
    std::vector<float> expected;
    for (int32_t r : rows)
      expected.insert(expected.end(), x.begin() + r * shape.d, x.begin() + (r + 1) * shape.d);
    DeviceArray<float> x_device = Upload(x);
    DeviceArray<int32_t> rows_device = Upload(rows);
    DeviceArray<float> y_device = Upload(std::vector<float>(count * shape.d, NAN));
    ASSERT_TRUE(
        GatherRows(context(), x_device.data(), rows_device.data(), count, shape.d, y_device.data())
            .ok());
    ExpectClose(Download(y_device), expected, 0.0f, Name("gather_rows", shape));
  }
}

TEST_F(ElementwiseCudaTest, EmbedMatchesModelEmbed) {
  constexpr int64_t kVocab = 97;
  uint32_t seed = 400;
  for (const MatrixShape& shape : kMatrixShapes) {
    const std::vector<float> table = RandomFloats(kVocab * shape.d, seed++);
    std::mt19937 generator(seed++);
    std::vector<int32_t> tokens(shape.rows);
    std::vector<int64_t> positions(shape.rows);
    for (int64_t r = 0; r < shape.rows; ++r) {
      tokens[r] = static_cast<int32_t>(generator() % kVocab);
      positions[r] = r;
    }
    // Long positions too: the angle is computed in double on both sides.
    if (shape.rows > 2) {
      positions[shape.rows - 1] = 10'000'000;
      positions[shape.rows - 2] = 123'457;
      positions[shape.rows / 2] = 1 << 20;
    }
    const float scale = std::sqrt(static_cast<float>(shape.d));
    // Model::Embed: the scaled row, then cpu::AddSinusoidalPosition.
    std::vector<float> expected(shape.rows * shape.d);
    for (int64_t r = 0; r < shape.rows; ++r) {
      float* row = expected.data() + r * shape.d;
      for (int64_t i = 0; i < shape.d; ++i) row[i] = table[tokens[r] * shape.d + i] * scale;
      cpu::AddSinusoidalPosition(positions[r], shape.d, row);
    }
    DeviceArray<float> table_device = Upload(table);
    DeviceArray<int32_t> tokens_device = Upload(tokens);
    DeviceArray<int64_t> positions_device = Upload(positions);
    DeviceArray<float> out_device = Upload(std::vector<float>(expected.size(), NAN));
    ASSERT_TRUE(Embed(context(), table_device.data(), tokens_device.data(), positions_device.data(),
                      shape.rows, shape.d, scale, out_device.data())
                    .ok());
    ExpectClose(Download(out_device), expected, kKernelTolerance, Name("embed", shape));
  }
}

TEST_F(ElementwiseCudaTest, RmsNormMatchesCpu) {
  uint32_t seed = 500;
  for (const MatrixShape& shape : kMatrixShapes) {
    std::vector<float> x = RandomFloats(shape.rows * shape.d, seed++, -2.0f, 3.0f);
    const std::vector<float> gamma = RandomFloats(shape.d, seed++, 0.5f, 1.5f);
    std::vector<float> expected(x.size());
    cpu::RmsNorm(x.data(), shape.rows, shape.d, gamma.data(), 1e-6f, expected.data());

    DeviceArray<float> x_device = Upload(x);
    DeviceArray<float> gamma_device = Upload(gamma);
    DeviceArray<float> y_device = Upload(std::vector<float>(x.size(), NAN));
    ASSERT_TRUE(RmsNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(), 1e-6f,
                        y_device.data())
                    .ok());
    ExpectClose(Download(y_device), expected, kKernelTolerance, Name("rms_norm", shape));
    // In place (x == y), as the header allows.
    ASSERT_TRUE(RmsNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(), 1e-6f,
                        x_device.data())
                    .ok());
    ExpectClose(Download(x_device), expected, kKernelTolerance, Name("rms_norm_in_place", shape));
  }
}

TEST_F(ElementwiseCudaTest, SwiGluMatchesCpu) {
  uint32_t seed = 600;
  for (const MatrixShape& shape : kMatrixShapes) {  // d plays ff
    const std::vector<float> gate_up = RandomFloats(shape.rows * 2 * shape.d, seed++, -6.0f, 6.0f);
    std::vector<float> expected(shape.rows * shape.d);
    cpu::SwiGlu(gate_up.data(), shape.rows, shape.d, expected.data());
    DeviceArray<float> gate_up_device = Upload(gate_up);
    DeviceArray<float> out_device = Upload(std::vector<float>(expected.size(), NAN));
    ASSERT_TRUE(SwiGluRounded(context(), gate_up_device.data(), shape.rows, shape.d,
                              WeightType::kF32, out_device.data())
                    .ok());
    ExpectClose(Download(out_device), expected, kKernelTolerance, Name("swiglu", shape));
  }
}

// RmsNormRounded and SwiGluRounded write their fp32 results rounded to nearest even, bit for bit.
TEST_F(ElementwiseCudaTest, RoundedRmsNormAndSwiGluAreTheFp32ResultsRounded) {
  uint32_t seed = 700;
  for (const WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    const std::string name = type == WeightType::kBF16 ? "bf16" : "fp16";
    for (const MatrixShape& shape : kMatrixShapes) {
      const int64_t n = shape.rows * shape.d;
      const std::vector<float> x = RandomFloats(2 * n, seed++, -3.0f, 3.0f);
      const std::vector<float> gamma = RandomFloats(shape.d, seed++, 0.5f, 1.5f);
      DeviceArray<float> x_device = Upload(x);
      DeviceArray<float> gamma_device = Upload(gamma);
      DeviceArray<float> full = Upload(std::vector<float>(n, NAN));
      DeviceArray<uint16_t> half = Upload(std::vector<uint16_t>(n, 0xffff));
      ASSERT_TRUE(RmsNorm(context(), x_device.data(), shape.rows, shape.d, gamma_device.data(),
                          1e-6f, full.data())
                      .ok());
      ASSERT_TRUE(RmsNormRounded(context(), x_device.data(), shape.rows, shape.d,
                                 gamma_device.data(), 1e-6f, type, half.data())
                      .ok());
      ExpectClose(Widened(Download(half), type), RoundedOnHost(Download(full), type), 0.0f,
                  Name(("rms_norm_" + name).c_str(), shape));

      // x as [rows, 2 d] gate | up rows.
      ASSERT_TRUE(SwiGluRounded(context(), x_device.data(), shape.rows, shape.d, WeightType::kF32,
                                full.data())
                      .ok());
      ASSERT_TRUE(
          SwiGluRounded(context(), x_device.data(), shape.rows, shape.d, type, half.data()).ok());
      ExpectClose(Widened(Download(half), type), RoundedOnHost(Download(full), type), 0.0f,
                  Name(("swiglu_" + name).c_str(), shape));
    }
  }
}

// Rotary and fla models embed without a positional term: the scaled rows, exactly.
TEST_F(ElementwiseCudaTest, EmbedWithoutPositionsIsTheScaledRow) {
  constexpr int64_t kVocab = 97;
  uint32_t seed = 800;
  for (const MatrixShape& shape : kMatrixShapes) {
    const std::vector<float> table = RandomFloats(kVocab * shape.d, seed++);
    std::mt19937 generator(seed++);
    std::vector<int32_t> tokens(shape.rows);
    for (int32_t& token : tokens) token = static_cast<int32_t>(generator() % kVocab);
    const float scale = shape.d % 2 == 0 ? std::sqrt(static_cast<float>(shape.d)) : 1.0f;
    std::vector<float> expected(shape.rows * shape.d);
    for (int64_t r = 0; r < shape.rows; ++r) {
      for (int64_t i = 0; i < shape.d; ++i) {
        expected[r * shape.d + i] = table[tokens[r] * shape.d + i] * scale;
      }
    }
    DeviceArray<float> table_device = Upload(table);
    DeviceArray<int32_t> tokens_device = Upload(tokens);
    DeviceArray<float> out_device = Upload(std::vector<float>(expected.size(), NAN));
    ASSERT_TRUE(Embed(context(), table_device.data(), tokens_device.data(), nullptr, shape.rows,
                      shape.d, scale, out_device.data())
                    .ok());
    ExpectClose(Download(out_device), expected, 0.0f, Name("embed_no_positions", shape));
  }
}

TEST_F(ElementwiseCudaTest, EmptyInputsAreNoOps) {
  EXPECT_TRUE(LayerNorm(context(), nullptr, 0, 8, nullptr, nullptr, 1e-5f, nullptr).ok());
  EXPECT_TRUE(
      ActivateRounded(context(), Activation::kGelu, nullptr, 0, WeightType::kF32, nullptr).ok());
  EXPECT_TRUE(RoundTo(context(), nullptr, 0, WeightType::kBF16, nullptr).ok());
  EXPECT_TRUE(AddBias(context(), nullptr, 0, 8, nullptr).ok());
  EXPECT_TRUE(Embed(context(), nullptr, nullptr, nullptr, 0, 8, 1.0f, nullptr).ok());
  EXPECT_TRUE(RmsNorm(context(), nullptr, 0, 8, nullptr, 1e-6f, nullptr).ok());
  EXPECT_TRUE(SwiGluRounded(context(), nullptr, 0, 8, WeightType::kBF16, nullptr).ok());
  EXPECT_FALSE(RmsNorm(context(), nullptr, 1, 0, nullptr, 1e-6f, nullptr).ok());
  EXPECT_FALSE(SwiGluRounded(context(), nullptr, 1, -1, WeightType::kF32, nullptr).ok());
  EXPECT_FALSE(LayerNorm(context(), nullptr, 1, 0, nullptr, nullptr, 1e-5f, nullptr).ok());
  EXPECT_FALSE(
      ActivateRounded(context(), Activation::kRelu, nullptr, -1, WeightType::kF32, nullptr).ok());
  EXPECT_FALSE(RoundTo(context(), nullptr, -1, WeightType::kF16, nullptr).ok());
  EXPECT_TRUE(context().Synchronize().ok());
}

}  // namespace
}  // namespace abcd::cuda
