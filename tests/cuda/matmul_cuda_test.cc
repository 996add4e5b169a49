// cuBLAS projections against the CPU BLAS projection: fp32 weights to fp32 rounding, bf16 and
// fp16 weights within 1e-2 of the fp32 result (and to fp32 rounding of a CPU GEMM over the same
// rounded operands). Skipped without a GPU.
#include "engine/ops/matmul_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <vector>

#include "engine/ops/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

std::vector<float> Rounded(const std::vector<float>& values, WeightType type) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = type == WeightType::kBF16 ? __bfloat162float(__float2bfloat16_rn(values[i]))
                                       : __half2float(__float2half_rn(values[i]));
  }
  return out;
}

struct LinearShape {
  int64_t rows, in, out;
};

class LinearCudaTest : public CudaTest {
 protected:
  void Compare(const LinearShape& shape, WeightType type, bool with_bias) {
    const std::string what = "rows " + std::to_string(shape.rows) + " in " +
                             std::to_string(shape.in) + " out " + std::to_string(shape.out);
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
      ExpectClose(actual, exact, 1e-5f, "fp32 " + what);
      return;
    }
    ExpectClose(actual, exact, 1e-2f, "16-bit vs fp32 " + what);
    const std::vector<float> x16 = Rounded(x, type), w16 = Rounded(w, type);
    std::vector<float> same_operands(shape.rows * shape.out);
    cpu::Linear(x16.data(), shape.rows,
                PackedMatrix::Pack(w16, shape.out, shape.in, WeightFormat::kF32),
                with_bias ? bias.data() : nullptr, same_operands.data(), nullptr);
    ExpectClose(actual, same_operands, 1e-5f, "16-bit vs rounded operands " + what);
  }
};

const LinearShape kLinearShapes[] = {{1, 256, 768}, {7, 128, 8000}, {256, 512, 2048}, {3, 13, 5}};

TEST_F(LinearCudaTest, Fp32MatchesCpu) {
  for (const LinearShape& shape : kLinearShapes) {
    Compare(shape, WeightType::kF32, true);
    Compare(shape, WeightType::kF32, false);
  }
}

TEST_F(LinearCudaTest, Bf16WeightsAccumulateInFp32) {
  for (const LinearShape& shape : kLinearShapes) Compare(shape, WeightType::kBF16, true);
}

TEST_F(LinearCudaTest, Fp16WeightsAccumulateInFp32) {
  for (const LinearShape& shape : kLinearShapes) Compare(shape, WeightType::kF16, true);
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
