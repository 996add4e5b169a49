#include "engine/device/cuda_context.h"

#include "absl/strings/str_cat.h"

namespace abcd::cuda {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

absl::Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // The runtime also records the error as the thread's last error; reported here, it must not
  // resurface in the next launch's CheckLaunch (a sticky error stays whatever we do).
  cudaGetLastError();
  return absl::InternalError(
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

absl::Status Check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cublasGetStatusName(status), " (",
                                          cublasGetStatusString(status), ")"));
}

absl::Status CheckLaunch(const char* kernel) { return Check(cudaGetLastError(), kernel); }

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return absl::NotFoundError(
        absl::StrCat("CUDA device ", device, " not found (", count, " usable devices)"));
  }
  std::unique_ptr<CudaContext> context(new CudaContext());
  context->device_ = device;
  absl::Status status = Check(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp properties{};
  if (status.ok()) status = Check(cudaGetDeviceProperties(&properties, device), "properties");
  if (!status.ok()) return status;
  context->device_name_ = properties.name;
  context->sm_count_ = properties.multiProcessorCount;
  status = Check(cudaStreamCreateWithFlags(&context->stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate");
  if (status.ok()) status = Check(cublasCreate(&context->cublas_), "cublasCreate");
  if (status.ok()) status = Check(cublasSetStream(context->cublas_, context->stream_), "stream");
  if (status.ok()) status = Check(cublasLtCreate(&context->cublas_lt_), "cublasLtCreate");
  if (status.ok()) {
    status = Check(cudaMalloc(&context->cublas_workspace_, kCublasWorkspaceBytes),
                   "cudaMalloc cuBLAS workspace");
  }
  if (status.ok()) {
    status = Check(
        cublasSetWorkspace(context->cublas_, context->cublas_workspace_, kCublasWorkspaceBytes),
        "cublasSetWorkspace");
  }
  // Deterministic results: no split-K atomics in cuBLAS reductions.
  if (status.ok()) {
    status = Check(cublasSetAtomicsMode(context->cublas_, CUBLAS_ATOMICS_NOT_ALLOWED), "atomics");
  }
  if (!status.ok()) return status;
  return context;
}

CudaContext::~CudaContext() {
  if (cublas_lt_ != nullptr) cublasLtDestroy(cublas_lt_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  for (void* retired : retired_workspaces_) cudaFree(retired);
}

absl::StatusOr<void*> CudaContext::Workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  void* grown = nullptr;
  absl::Status status = Check(cudaMalloc(&grown, bytes), "cudaMalloc workspace");
  if (!status.ok()) return status;
  if (workspace_ != nullptr) retired_workspaces_.push_back(workspace_);
  workspace_ = grown;
  workspace_bytes_ = bytes;
  return workspace_;
}

absl::Status CudaContext::MakeCurrent() const {
  return Check(cudaSetDevice(device_), "cudaSetDevice");
}

absl::Status CudaContext::Synchronize() {
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace abcd::cuda
