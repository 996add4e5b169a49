#include "engine/backend/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/core/status_macros.h"
#if ABCD_CUDA_ENABLED
#include "engine/backend/cuda_backend.h"
#endif

namespace abcd {
namespace {

#if ABCD_CUDA_ENABLED
absl::StatusOr<std::unique_ptr<DecodeBackend>> CreateCudaBackend(const Model& model,
                                                                 const BackendOptions& options) {
  cuda::CudaBackendOptions cuda_options;
  cuda_options.max_sequences = options.max_sequences;
  cuda_options.max_prefill_tokens = options.max_prefill_tokens;
  cuda_options.max_context = options.max_context;
  cuda_options.state_budget_bytes = options.state_budget_bytes;
  cuda_options.weights = options.device_weights == "fp32"   ? cuda::WeightType::kF32
                         : options.device_weights == "fp16" ? cuda::WeightType::kF16
                                                            : cuda::WeightType::kBF16;
  cuda_options.cuda_graphs = options.cuda_graphs;
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend,
                        cuda::CudaBackend::Create(model, cuda_options));
  return std::unique_ptr<DecodeBackend>(std::move(backend));
}
#else
absl::StatusOr<std::unique_ptr<DecodeBackend>> CreateCudaBackend(const Model&,
                                                                 const BackendOptions&) {
  return absl::UnavailableError("this build has no CUDA backend (nvcc was not found)");
}
#endif

}  // namespace

absl::StatusOr<DeviceChoice> ParseDeviceChoice(absl::string_view value, absl::string_view field) {
  if (value == "auto") return DeviceChoice::kAuto;
  if (value == "cpu") return DeviceChoice::kCpu;
  if (value == "cuda") return DeviceChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be auto, cpu or cuda, got \"", value, "\""));
}

absl::Status ValidateDeviceWeightType(absl::string_view value, absl::string_view field) {
  if (value == "bf16" || value == "fp16" || value == "fp32") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be bf16, fp16 or fp32, got \"", value, "\""));
}

bool BuiltWithCuda() { return ABCD_CUDA_ENABLED != 0; }

absl::StatusOr<CreatedBackend> CreateDecodeBackend(const Model& model,
                                                   const BackendOptions& options) {
  if (options.state_budget_bytes <= 0) {
    return absl::InvalidArgumentError("state budget must be positive");
  }
  ABCD_RETURN_IF_ERROR(ValidateDeviceWeightType(options.device_weights, "device weights"));
  CreatedBackend created;
  if (options.device != DeviceChoice::kCpu) {
    absl::StatusOr<std::unique_ptr<DecodeBackend>> cuda = CreateCudaBackend(model, options);
    if (cuda.ok()) {
      created.backend = *std::move(cuda);
      return created;
    }
    if (options.device == DeviceChoice::kCuda) return cuda.status();
    created.fallback_reason = std::string(cuda.status().message());
  }
  created.backend = std::make_unique<CpuBackend>(model, options.state_budget_bytes);
  return created;
}

}  // namespace abcd
