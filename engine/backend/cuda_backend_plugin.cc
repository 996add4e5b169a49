// libabcd_cuda_backend.so: the CUDA backend as a plugin, so that abcd-server and the other
// binaries load CUDA's runtime and cuBLAS only when a GPU run is asked for, and the same binary
// serves on CPU-only hosts that have no CUDA libraries. backend_factory.cc dlopen()s it and calls
// the one exported function. Built from the same tree with the same flags as its caller, so
// C++ types cross the boundary as they are.
#include "engine/backend/backend_factory.h"
#include "engine/backend/cuda_backend.h"

extern "C" __attribute__((visibility("default"))) void abcd_create_cuda_backend_v1(
    const abcd::Model* model, const abcd::BackendOptions* options,
    std::unique_ptr<abcd::DecodeBackend>* backend, absl::Status* status) {
  abcd::cuda::CudaBackendOptions cuda_options;
  cuda_options.device = options->cuda_device;
  cuda_options.max_sequences = options->max_sequences;
  cuda_options.max_prefill_tokens = options->max_prefill_tokens;
  cuda_options.max_context = options->max_context;
  cuda_options.state_budget_bytes = options->state_budget_bytes;
  cuda_options.weights = options->device_weights == "fp32"   ? abcd::cuda::WeightType::kF32
                         : options->device_weights == "fp16" ? abcd::cuda::WeightType::kF16
                                                             : abcd::cuda::WeightType::kBF16;
  cuda_options.cuda_graphs = options->cuda_graphs;
  absl::StatusOr<std::unique_ptr<abcd::cuda::CudaBackend>> created =
      abcd::cuda::CudaBackend::Create(*model, cuda_options);
  if (!created.ok()) {
    *status = created.status();
    return;
  }
  *backend = *std::move(created);
  *status = absl::OkStatus();
}
