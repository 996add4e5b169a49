// cuBLASLt projections against the CPU BLAS projection: fp32 weights to fp32 rounding, bf16 and
// fp16 weights within 1e-2 of the fp32 result (and to fp32 rounding of a CPU GEMM over the same
// rounded operands); the residual (accumulate) form, inputs rounded beforehand, misaligned
// operands and a memoised plan run with another bias. Skipped without a GPU.
#include "engine/ops/matmul_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/elementwise_cuda.h"
#include "engine/ops/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

struct LinearShape {
  int64_t rows, in, out;
};

// Sums over `in` products in another order than the CPU's differ by more for long rows: the
// tolerances grow as sqrt(in / 256).
float ScaledTolerance(float tolerance, int64_t in) {
  return tolerance * std::max(1.0f, std::sqrt(static_cast<float>(in) / 256.0f));
}

class LinearCudaTest : public CudaTest {
 protected:
  void Compare(const LinearShape& shape, WeightType type, bool with_bias) {
    const std::string what = "rows " + std::to_string(shape.rows) + " in " +
                             std::to_string(shape.in) + " out " + std::to_string(shape.out) +
                             " gemv " + std::to_string(context().gemv_max_rows());
    const float exact_tolerance = ScaledTolerance(1e-5f, shape.in);
    const std::vector<float> x = RandomFloats(shape.rows * shape.in, 1);
    const std::vector<float> w = RandomFloats(shape.out * shape.in, 2, -0.1f, 0.1f);
    const std::vector<float> bias = RandomFloats(shape.out, 3);
    absl::StatusOr<DeviceMatrix> matrix =
        DeviceMatrix::Upload(context(), w.data(), shape.out, shape.in, type);
    ASSERT_TRUE(matrix.ok()) << matrix.status();
    DeviceArray<float> device_x = Upload(x);
    DeviceArray<float> device_bias = Upload(bias);
    DeviceArray<float> device_y = Upload(std::vector<float>(shape.rows * shape.out, NAN));
    ASSERT_TRUE(Linear(context(), device_x.data(), shape.rows, *matrix,
                       with_bias ? device_bias.data() : nullptr, device_y.data())
                    .ok());
    const std::vector<float> actual = Download(device_y);

    std::vector<float> exact(shape.rows * shape.out);
    cpu::Linear(x.data(), shape.rows,
                PackedMatrix::Pack(w, shape.out, shape.in, WeightFormat::kF32),
                with_bias ? bias.data() : nullptr, exact.data(), nullptr);
    if (type == WeightType::kF32) {
      ExpectClose(actual, exact, exact_tolerance, "fp32 " + what);
      return;
    }
    ExpectClose(actual, exact, ScaledTolerance(1e-2f, shape.in), "16-bit vs fp32 " + what);
    const std::vector<float> x16 = RoundedOnHost(x, type), w16 = RoundedOnHost(w, type);
    std::vector<float> same_operands(shape.rows * shape.out);
    cpu::Linear(x16.data(), shape.rows,
                PackedMatrix::Pack(w16, shape.out, shape.in, WeightFormat::kF32),
                with_bias ? bias.data() : nullptr, same_operands.data(), nullptr);
    ExpectClose(actual, same_operands, exact_tolerance, "16-bit vs rounded operands " + what);
  }
};

// With 16-bit weights, rows up to the context's gemv_max_rows take the GEMV kernel (in % 8 ==
// 0: 16-byte loads, rows of 2048 and 4096 split over 2 and 4 warps; in = 13: scalar loads),
// more rows cuBLASLt. The tests run each shape both ways.
const LinearShape kLinearShapes[] = {{1, 256, 768},  {7, 128, 8000},  {256, 512, 2048},
                                     {3, 13, 5},     {8, 4096, 1000}, {4, 4096, 1000},
                                     {2, 2048, 300}, {9, 64, 40},     {1, 1024, 50001}};
const int kGemvSettings[] = {0, kGemvMaxRows};

TEST_F(LinearCudaTest, Fp32MatchesCpu) {
  for (const LinearShape& shape : kLinearShapes) {
    Compare(shape, WeightType::kF32, true);
    Compare(shape, WeightType::kF32, false);
  }
}

TEST_F(LinearCudaTest, Bf16WeightsAccumulateInFp32) {
  for (const int gemv : kGemvSettings) {
    context().set_gemv_max_rows(gemv);
    for (const LinearShape& shape : kLinearShapes) {
      Compare(shape, WeightType::kBF16, true);
      Compare(shape, WeightType::kBF16, false);
    }
  }
}

TEST_F(LinearCudaTest, Fp16WeightsAccumulateInFp32) {
  for (const int gemv : kGemvSettings) {
    context().set_gemv_max_rows(gemv);
    for (const LinearShape& shape : kLinearShapes) Compare(shape, WeightType::kF16, true);
  }
}

// y += x W^T + b, the residual form: the output starts from random values.
TEST_F(LinearCudaTest, AccumulateAddsToTheOutput) {
  for (const int gemv : kGemvSettings) {
    context().set_gemv_max_rows(gemv);
    for (const WeightType type : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
      for (const LinearShape& shape : kLinearShapes) {
        const std::string what = "accumulate type " + std::to_string(static_cast<int>(type)) +
                                 " rows " + std::to_string(shape.rows) + " in " +
                                 std::to_string(shape.in) + " out " + std::to_string(shape.out) +
                                 " gemv " + std::to_string(gemv);
        const std::vector<float> x = RandomFloats(shape.rows * shape.in, 4);
        const std::vector<float> w = RandomFloats(shape.out * shape.in, 5, -0.1f, 0.1f);
        const std::vector<float> bias = RandomFloats(shape.out, 6);
        const std::vector<float> y0 = RandomFloats(shape.rows * shape.out, 7, -4.0f, 4.0f);
        absl::StatusOr<DeviceMatrix> matrix =
            DeviceMatrix::Upload(context(), w.data(), shape.out, shape.in, type);
        ASSERT_TRUE(matrix.ok()) << matrix.status();
        DeviceArray<float> device_x = Upload(x);
        DeviceArray<float> device_bias = Upload(bias);
        DeviceArray<float> device_y = Upload(y0);
        ASSERT_TRUE(Linear(context(), device_x.data(), shape.rows, *matrix, device_bias.data(),
                           device_y.data(), LinearOutput::kAccumulate)
                        .ok());
        std::vector<float> expected(y0.size());
        const std::vector<float> x_used = RoundedOnHost(x, type), w_used = RoundedOnHost(w, type);
        cpu::Linear(x_used.data(), shape.rows,
                    PackedMatrix::Pack(w_used, shape.out, shape.in, WeightFormat::kF32),
                    bias.data(), expected.data(), nullptr);
        for (size_t i = 0; i < expected.size(); ++i) expected[i] += y0[i];
        ExpectClose(Download(device_y), expected, ScaledTolerance(1e-5f, shape.in), what);
      }
    }
  }
}

// LinearRounded over RoundTo's output is Linear; operands only 4-byte aligned (one float past
// an allocation) still run; a shape's memoised plan takes the bias of each call.
TEST_F(LinearCudaTest, RoundedInputsMisalignmentAndPlanReuse) {
  for (const LinearShape& shape : {LinearShape{5, 96, 200}, LinearShape{2, 96, 200}}) {
    context().set_gemv_max_rows(kGemvMaxRows);  // 2 rows: GEMV; 5: cuBLASLt
    for (const WeightType type : {WeightType::kF32, WeightType::kBF16}) {
      const std::vector<float> x = RandomFloats(shape.rows * shape.in + 1, 8);
      const std::vector<float> w = RandomFloats(shape.out * shape.in, 9, -0.1f, 0.1f);
      const std::vector<float> bias_a = RandomFloats(shape.out, 10),
                               bias_b = RandomFloats(shape.out, 11);
      absl::StatusOr<DeviceMatrix> matrix =
          DeviceMatrix::Upload(context(), w.data(), shape.out, shape.in, type);
      ASSERT_TRUE(matrix.ok()) << matrix.status();
      DeviceArray<float> device_x = Upload(x);
      DeviceArray<float> device_a = Upload(bias_a), device_b = Upload(bias_b);
      DeviceArray<float> y = Upload(std::vector<float>(shape.rows * shape.out + 1, NAN));

      std::vector<float> expected(static_cast<size_t>(shape.rows * shape.out));
      const std::vector<float> x_used =
          RoundedOnHost(std::vector<float>(x.begin() + 1, x.end()), type);
      const PackedMatrix packed =
          PackedMatrix::Pack(RoundedOnHost(w, type), shape.out, shape.in, WeightFormat::kF32);
      for (const auto* bias : {&bias_a, &bias_b, &bias_a}) {
        const float* device_bias = bias == &bias_a ? device_a.data() : device_b.data();
        ASSERT_TRUE(
            Linear(context(), device_x.data() + 1, shape.rows, *matrix, device_bias, y.data() + 1)
                .ok());
        cpu::Linear(x_used.data(), shape.rows, packed, bias->data(), expected.data(), nullptr);
        const std::vector<float> actual = Download(y);
        EXPECT_TRUE(std::isnan(actual[0])) << "wrote before the output";
        ExpectClose(std::vector<float>(actual.begin() + 1, actual.end()), expected, 1e-5f,
                    "misaligned, bias " + std::string(bias == &bias_a ? "a" : "b"));
      }

      if (type == WeightType::kF32) continue;
      DeviceArray<uint16_t> rounded = Upload(std::vector<uint16_t>(shape.rows * shape.in));
      ASSERT_TRUE(
          RoundTo(context(), device_x.data() + 1, shape.rows * shape.in, type, rounded.data())
              .ok());
      DeviceArray<float> from_rounded = Upload(std::vector<float>(shape.rows * shape.out, NAN));
      ASSERT_TRUE(LinearRounded(context(), rounded.data(), shape.rows, *matrix, device_a.data(),
                                from_rounded.data())
                      .ok());
      cpu::Linear(x_used.data(), shape.rows, packed, bias_a.data(), expected.data(), nullptr);
      ExpectClose(Download(from_rounded), expected, 1e-5f, "LinearRounded");
    }
  }
}

TEST_F(LinearCudaTest, ZeroRowsIsANoOp) {
  const std::vector<float> w = RandomFloats(4 * 3, 2);
  absl::StatusOr<DeviceMatrix> matrix =
      DeviceMatrix::Upload(context(), w.data(), 4, 3, WeightType::kF32);
  ASSERT_TRUE(matrix.ok());
  EXPECT_TRUE(Linear(context(), nullptr, 0, *matrix, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace abcd::cuda
