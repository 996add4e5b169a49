#include "engine/backend/backend_factory.h"

#include <dlfcn.h>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/backend/cpu_backend.h"
#include "engine/core/plugin_library.h"
#include "engine/core/status_macros.h"

#ifndef ABCD_CUDA_BACKEND_PLUGIN_BUILD_PATH
#define ABCD_CUDA_BACKEND_PLUGIN_BUILD_PATH ""  // this build has no CUDA backend
#endif

namespace abcd {
namespace {

constexpr char kCudaPlugin[] = "libabcd_cuda_backend.so";
constexpr char kCreateCudaBackend[] = "abcd_create_cuda_backend_v1";
using CreateCudaBackendFn = void (*)(const Model*, const BackendOptions*,
                                     std::unique_ptr<DecodeBackend>*, absl::Status*);

// The plugin stays loaded for the life of the process: backends it made may live until exit.
absl::StatusOr<std::unique_ptr<DecodeBackend>> CreateCudaBackend(const Model& model,
                                                                 const BackendOptions& options) {
  absl::StatusOr<PluginLibrary> plugin =
      OpenPlugin(kCudaPlugin, "ABCD_CUDA_BACKEND_PLUGIN", ABCD_CUDA_BACKEND_PLUGIN_BUILD_PATH,
                 RTLD_NOW | RTLD_LOCAL);
  if (!plugin.ok()) {
    return absl::Status(plugin.status().code(),
                        absl::StrCat("CUDA backend ", plugin.status().message(),
                                     BuiltWithCuda() ? "" : "; this build has no CUDA"));
  }
  auto create = reinterpret_cast<CreateCudaBackendFn>(::dlsym(plugin->handle, kCreateCudaBackend));
  if (create == nullptr) {
    ::dlclose(plugin->handle);
    return absl::InternalError(absl::StrCat(plugin->path, " has no ", kCreateCudaBackend));
  }
  std::unique_ptr<DecodeBackend> backend;
  absl::Status status;
  create(&model, &options, &backend, &status);
  ABCD_RETURN_IF_ERROR(status);
  return backend;
}

}  // namespace

absl::StatusOr<DeviceSelection> ParseDevice(absl::string_view value, absl::string_view field) {
  if (value == "auto") return DeviceSelection{DeviceChoice::kAuto, 0};
  if (value == "cpu") return DeviceSelection{DeviceChoice::kCpu, 0};
  if (value == "cuda") return DeviceSelection{DeviceChoice::kCuda, 0};
  absl::string_view ordinal_text = value;
  int ordinal = -1;
  if (absl::ConsumePrefix(&ordinal_text, "cuda:") && !ordinal_text.empty() &&
      absl::c_all_of(ordinal_text, absl::ascii_isdigit) &&
      absl::SimpleAtoi(ordinal_text, &ordinal)) {
    return DeviceSelection{DeviceChoice::kCuda, ordinal};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be auto, cpu, cuda or cuda:N, got \"", value, "\""));
}

absl::Status ValidateDeviceWeightType(absl::string_view value, absl::string_view field) {
  if (value == "bf16" || value == "fp16" || value == "fp32") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be bf16, fp16 or fp32, got \"", value, "\""));
}

bool BuiltWithCuda() { return sizeof(ABCD_CUDA_BACKEND_PLUGIN_BUILD_PATH) > 1; }

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
  created.backend = std::make_unique<CpuBackend>(model, options.state_budget_bytes,
                                                 options.cpu_threads, options.cpu_products);
  return created;
}

}  // namespace abcd
