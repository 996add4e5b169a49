// The CUDA context the CUDA ops take explicitly: one device, one stream, one cuBLAS handle and a
// reusable workspace. There are no global handles: every op gets its context as an argument, so
// several engines (or tests) can share a process. Built only when ABCD_WITH_CUDA finds nvcc;
// Create() fails cleanly (and callers fall back to the CPU) when there is no driver or GPU.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace abcd::cuda {

// Usable CUDA devices: 0 without a driver or without a GPU (never an error).
int DeviceCount();

// OK, or an Internal error naming `what` and the CUDA / cuBLAS error.
absl::Status Check(cudaError_t error, const char* what);
absl::Status Check(cublasStatus_t status, const char* what);

// Checks the last kernel launch on the calling thread.
absl::Status CheckLaunch(const char* kernel);

class CudaContext {
 public:
  // Fails with NotFound when `device` does not exist (including "no GPU at all").
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int device = 0);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  int sm_count() const { return sm_count_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  // cuBLASLt, for GEMMs with epilogues (matmul_cuda.h). It shares cuBLAS's fixed workspace:
  // both run in stream order on the one stream.
  cublasLtHandle_t cublas_lt() const { return cublas_lt_; }
  void* cublas_workspace() const { return cublas_workspace_; }
  size_t cublas_workspace_bytes() const { return kCublasWorkspaceBytes; }

  // A device buffer of at least `bytes` for one op's scratch, owned by the context. Ops on the
  // stream share it in stream order. Growing allocates a larger buffer and keeps the old ones
  // until the context dies, because captured CUDA graphs keep the addresses they saw. Must not
  // grow during a capture (run the captured work once eagerly first).
  absl::StatusOr<void*> Workspace(size_t bytes);

  absl::Status Synchronize();

  // Rows up to which projections with 16-bit weights use abcd's GEMV kernel instead of cuBLASLt
  // (matmul_cuda.h, which also caps it); 0: always cuBLASLt. For benchmarks and tests.
  int gemv_max_rows() const { return gemv_max_rows_; }
  void set_gemv_max_rows(int rows) { gemv_max_rows_ = rows < 0 ? 0 : rows; }

  // Makes this context's device current on the calling thread. CUDA's current device is per
  // thread, and the thread that drives a backend is not the one that created it.
  absl::Status MakeCurrent() const;

 private:
  CudaContext() = default;
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  static constexpr int kDefaultGemvMaxRows = 4;  // measured best on an H200 (engine/CUDA.md)

  int device_ = 0;
  std::string device_name_;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  void* cublas_workspace_ = nullptr;  // fixed, so cuBLAS never allocates inside a CUDA graph
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<void*> retired_workspaces_;
  int gemv_max_rows_ = kDefaultGemvMaxRows;
};

// Owning device array of T (move-only). Copies go through the context's stream.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  static absl::StatusOr<DeviceArray> Allocate(int64_t count) {
    DeviceArray array;
    if (count > 0) {
      void* data = nullptr;
      absl::Status status =
          Check(cudaMalloc(&data, static_cast<size_t>(count) * sizeof(T)), "cudaMalloc");
      if (!status.ok()) return status;
      array.data_ = static_cast<T*>(data);
    }
    array.size_ = count;
    return array;
  }
  static absl::StatusOr<DeviceArray> FromHost(CudaContext& context, const std::vector<T>& host) {
    absl::StatusOr<DeviceArray> array = Allocate(static_cast<int64_t>(host.size()));
    if (!array.ok()) return array.status();
    absl::Status status = array->CopyFromHost(context, host.data(), array->size());
    if (!status.ok()) return status;
    return array;
  }
  DeviceArray(DeviceArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    if (this != &other) {
      Free();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~DeviceArray() { Free(); }

  T* data() const { return data_; }
  int64_t size() const { return size_; }

  absl::Status CopyFromHost(CudaContext& context, const T* host, int64_t count) {
    if (count > size_) return absl::OutOfRangeError("copy larger than the device array");
    return Check(cudaMemcpyAsync(data_, host, static_cast<size_t>(count) * sizeof(T),
                                 cudaMemcpyHostToDevice, context.stream()),
                 "cudaMemcpyAsync to device");
  }
  // Copies and waits: the host vector is ready on return.
  absl::StatusOr<std::vector<T>> ToHost(CudaContext& context) const {
    std::vector<T> host(static_cast<size_t>(size_));
    absl::Status status =
        Check(cudaMemcpyAsync(host.data(), data_, static_cast<size_t>(size_) * sizeof(T),
                              cudaMemcpyDeviceToHost, context.stream()),
              "cudaMemcpyAsync to host");
    if (status.ok()) status = context.Synchronize();
    if (!status.ok()) return status;
    return host;
  }

 private:
  void Free() {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace abcd::cuda
