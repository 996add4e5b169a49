// The backend layer under the Executor: rows split into per-sequence runs (what the CUDA
// backend batches), the CPU backend's accounting and decode equal to the Model's, and the
// --device choice: cpu is the CPU, auto falls back to it with a reason, cuda fails loudly
// where CUDA cannot serve, bad values name the field.
#include "engine/backend/decode_backend.h"

#include <gtest/gtest.h>

#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::kLmDir;
using testing::kMtDir;

std::unique_ptr<Model> LoadModel(const std::string& dir) {
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST(SequenceRuns, ConsecutiveRowsOfOneSequenceFormOneRun) {
  const std::vector<DecodeRow> rows = {
      {7, 1, true}, {3, 2, false}, {3, 4, false}, {3, 5, true}, {9, 6, true}};
  auto runs = SplitIntoSequenceRuns(rows);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ((*runs)[0].sequence, 7);
  EXPECT_EQ((*runs)[0].rows, 1);
  EXPECT_EQ((*runs)[1].sequence, 3);
  EXPECT_EQ((*runs)[1].first_row, 1);
  EXPECT_EQ((*runs)[1].rows, 3);
  EXPECT_EQ((*runs)[2].first_row, 4);
  EXPECT_TRUE(SplitIntoSequenceRuns({}).value().empty());
}

TEST(SequenceRuns, InterleavedRowsOfOneSequenceAreRefusedNamingTheRow) {
  const std::vector<DecodeRow> rows = {{1, 1, false}, {2, 1, false}, {1, 3, true}};
  auto runs = SplitIntoSequenceRuns(rows);
  EXPECT_EQ(runs.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(runs.status().message().find("rows[2]"), std::string::npos) << runs.status();
}

TEST(CpuBackend, DecodeEqualsTheModelAndAccountsForEverySequence) {
  auto model = LoadModel(kLmDir);
  ASSERT_NE(model, nullptr);
  const int64_t fixed = model->state_layout().FixedBytes();
  CpuBackend backend(*model, 4 * fixed);
  EXPECT_EQ(backend.name(), "cpu");
  EXPECT_EQ(backend.state_bytes_per_sequence(), fixed);
  EXPECT_EQ(backend.capacity_bytes(), 4 * fixed);

  auto a = backend.Acquire();
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<float> via_backend;
  ASSERT_TRUE(
      backend.Decode(std::vector<DecodeRow>{{*a, 1, false}, {*a, 5, true}}, &via_backend).ok());
  auto fork = backend.Fork(*a);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(backend.memory().sequences, 2);
  EXPECT_EQ(backend.memory().bytes_in_use, 2 * fixed);
  EXPECT_EQ(backend.memory().kv_bytes_in_use, 0);

  StatePool pool(model->state_layout(), 4 * fixed);
  auto b = pool.Acquire();
  ASSERT_TRUE(b.ok());
  std::vector<float> via_model;
  ASSERT_TRUE(
      model->Decode(std::vector<DecodeRow>{{*b, 1, false}, {*b, 5, true}}, pool, &via_model).ok());
  EXPECT_EQ(via_backend, via_model);

  backend.Release(*a);
  backend.Release(*fork);
  EXPECT_EQ(backend.memory().bytes_in_use, 0);
}

TEST(CpuBackend, RequestBeyondTheBudgetIsRefusedUpFront) {
  auto model = LoadModel(kLmDir);
  ASSERT_NE(model, nullptr);
  const int64_t fixed = model->state_layout().FixedBytes();
  CpuBackend backend(*model, 3 * fixed);
  EXPECT_EQ(backend.RequestBytes(10, 0, 10, 3).value(), 3 * fixed);
  auto refused = backend.RequestBytes(10, 0, 10, 4);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("budget"), std::string::npos) << refused.status();
}

TEST(DeviceChoice, BadValuesNameTheField) {
  EXPECT_EQ(ParseDevice("cpu", "--device")->choice, DeviceChoice::kCpu);
  EXPECT_EQ(ParseDevice("auto", "--device")->choice, DeviceChoice::kAuto);
  EXPECT_EQ(ParseDevice("cuda", "--device")->choice, DeviceChoice::kCuda);
  EXPECT_EQ(ParseDevice("cuda", "--device")->cuda_device, 0);
  absl::StatusOr<DeviceSelection> second = ParseDevice("cuda:1", "--device");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->choice, DeviceChoice::kCuda);
  EXPECT_EQ(second->cuda_device, 1);
  for (const char* value : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:99999999999"}) {
    absl::StatusOr<DeviceSelection> bad = ParseDevice(value, "--device");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_NE(bad.status().message().find("--device"), std::string::npos) << value;
    EXPECT_NE(bad.status().message().find(value), std::string::npos) << bad.status();
  }
  EXPECT_TRUE(ValidateDeviceWeightType("bf16", "--device_weights").ok());
  const absl::Status weights = ValidateDeviceWeightType("int4", "--device_weights");
  EXPECT_EQ(weights.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(weights.message().find("--device_weights"), std::string::npos);
}

TEST(DeviceChoice, CpuIsTheCpuAndAutoFallsBackWithAReason) {
  auto model = LoadModel(kMtDir);  // encoder-decoder: never on the CUDA backend
  ASSERT_NE(model, nullptr);
  BackendOptions options;
  options.device = DeviceChoice::kCpu;
  auto cpu = CreateDecodeBackend(*model, options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->backend->name(), "cpu");
  EXPECT_TRUE(cpu->fallback_reason.empty());

  options.device = DeviceChoice::kAuto;
  auto fallback = CreateDecodeBackend(*model, options);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->backend->name(), "cpu");
  EXPECT_FALSE(fallback->fallback_reason.empty());
  if (BuiltWithCuda()) {
    // The plugin loaded (with CUDA's libraries) and its backend refused the model itself.
    EXPECT_NE(fallback->fallback_reason.find("decoder-only"), std::string::npos)
        << fallback->fallback_reason;
  } else {
    EXPECT_NE(fallback->fallback_reason.find("not found"), std::string::npos)
        << fallback->fallback_reason;
  }

  options.device = DeviceChoice::kCuda;
  auto refused = CreateDecodeBackend(*model, options);
  EXPECT_FALSE(refused.ok());

  options.device = DeviceChoice::kCpu;
  options.device_weights = "fp8";
  EXPECT_EQ(CreateDecodeBackend(*model, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A CUDA device that does not exist is refused by `cuda:N` and named in the reason; `auto`
// (device 0) would still fall back to the CPU.
TEST(DeviceChoice, MissingCudaDeviceIsNamed) {
  auto model = LoadModel(kLmDir);
  ASSERT_NE(model, nullptr);
  BackendOptions options;
  options.device = DeviceChoice::kCuda;
  options.cuda_device = 63;
  auto refused = CreateDecodeBackend(*model, options);
  ASSERT_FALSE(refused.ok());
  if (BuiltWithCuda()) {
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound) << refused.status();
    EXPECT_NE(refused.status().message().find("CUDA device 63"), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace abcd
