// Picks and builds the DecodeBackend a served model runs on: `cpu`, `cuda`, or `auto` (CUDA when
// this build has it, a GPU is present, the model runs there and the parity probe passes;
// otherwise the CPU, with the reason kept for the log).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend/decode_backend.h"
#include "engine/model/model.h"

namespace abcd {

enum class DeviceChoice { kAuto, kCpu, kCuda };

struct DeviceSelection {
  DeviceChoice choice = DeviceChoice::kAuto;
  int cuda_device = 0;  // the CUDA device ordinal (as CUDA_VISIBLE_DEVICES numbers them)
};

// "auto", "cpu", "cuda" or "cuda:N" (device N, N >= 0); INVALID_ARGUMENT naming `field`
// otherwise.
absl::StatusOr<DeviceSelection> ParseDevice(absl::string_view value, absl::string_view field);
// "bf16", "fp16" or "fp32"; INVALID_ARGUMENT naming `field` otherwise.
absl::Status ValidateDeviceWeightType(absl::string_view value, absl::string_view field);

struct BackendOptions {
  DeviceChoice device = DeviceChoice::kAuto;
  int cuda_device = 0;
  int64_t state_budget_bytes = int64_t{1} << 30;  // CPU pool; CUDA slots are sized to it too
  int cpu_threads = 1;                            // the CPU backend's thread pool
  cpu::LinearProducts cpu_products = cpu::LinearProducts::kFloat32;  // its bf16 products
  int max_sequences = 256;                                           // CUDA state slots
  int max_prefill_tokens = 512;                                      // CUDA prefill chunk rows
  int64_t max_context = 8192;           // CUDA softmax KV tokens per sequence
  std::string device_weights = "bf16";  // CUDA projections: bf16, fp16 or fp32
  bool cuda_graphs = true;
};

struct CreatedBackend {
  std::unique_ptr<DecodeBackend> backend;
  // `auto` only: why CUDA was not used (empty when it was, or when the CPU was asked for).
  std::string fallback_reason;
};

// True when this build produced the CUDA backend plugin (libabcd_cuda_backend.so).
bool BuiltWithCuda();

// `model` must outlive the backend. CUDA comes from the plugin (found like the SentencePiece
// one: $ABCD_CUDA_BACKEND_PLUGIN, next to the binary, ../lib, the build tree). With `cuda`, any
// reason CUDA cannot serve is the error.
absl::StatusOr<CreatedBackend> CreateDecodeBackend(const Model& model,
                                                   const BackendOptions& options);

}  // namespace abcd
