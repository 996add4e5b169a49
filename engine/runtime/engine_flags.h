// The engine's flag values checked from their text, for a frontend that parses its flags
// without the engine's internal headers (server/core/server_config.cc). Each delegates to the
// parser declared next to its enum (named below), so the accepted values and the messages are
// those of the engine; every error is INVALID_ARGUMENT naming `flag`.
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

namespace cpu {
enum class LinearProducts;  // engine/ops/cpu_context.h
}  // namespace cpu
enum class WeightFormat;  // engine/ops/packed_matrix.h

// "time" or "tokens" (ParsePrefillPolicy, engine/scheduler/batch_planner.h).
absl::Status CheckPrefillPolicyFlag(absl::string_view value, absl::string_view flag);
// "auto", "cpu", "cuda" or "cuda:N" (ParseDevice, engine/backend/backend_factory.h).
absl::Status CheckDeviceFlag(absl::string_view value, absl::string_view flag);
// "bf16", "fp16" or "fp32" (ValidateDeviceWeightType, engine/backend/backend_factory.h).
absl::Status CheckDeviceWeightsFlag(absl::string_view value, absl::string_view flag);
// "f32", "bf16" or "f16" (ParseKvFormat, engine/state/kv_cache.h).
absl::Status CheckKvFormatFlag(absl::string_view value, absl::string_view flag);
// "off", "ngram" or "ngram:K" (ParseSpeculativeFlag, engine/scheduler/speculation.h).
absl::Status CheckSpeculativeFlag(absl::string_view value, absl::string_view flag);
// A weight format (ParseWeightFormat, engine/ops/packed_matrix.h).
absl::Status CheckWeightFormatFlag(absl::string_view value, absl::string_view flag);
// "auto", "fp32", "bf16" (where this CPU has AVX512_BF16) or "int8" (where it has AVX-512
// VNNI): the CPU products (cpu::LinearProducts, engine/ops/cpu_context.h; support:
// engine/ops/matmul.h).
absl::Status CheckCpuComputeFlag(absl::string_view value, absl::string_view flag);

// The default of every frontend's CPU-compute flag (abcd-server --cpu_compute, abcd-cli
// --cpu-compute, abcd-bench --cpu_compute).
inline constexpr absl::string_view kDefaultCpuCompute = "auto";

// The products a model whose matrices are kept in `weights` is multiplied with, for a checked
// flag value (CheckCpuComputeFlag's rules, then):
//   auto  bf16 products for bf16 weights where the CPU has AVX512_BF16 (what llama.cpp does
//         with bf16 weights; perplexity +0.003 %, loadtest/results/fla-prefill.md), exact fp32
//         products otherwise (fp32, f16 and int8 weights, or a CPU without AVX512_BF16);
//   fp32  exact fp32 products for every format (int8 weights by 16-bit activations);
//   bf16  bf16 products; refused unless the weights are bf16;
//   int8  8-bit activations (W8A8); refused unless the weights are int8.
// Refusals are INVALID_ARGUMENT naming `flag`, `model` and `weight_flag` (the flag that picks
// the weight format, e.g. "--weight_format").
absl::StatusOr<cpu::LinearProducts> ResolveCpuCompute(absl::string_view value, WeightFormat weights,
                                                      absl::string_view flag,
                                                      absl::string_view model,
                                                      absl::string_view weight_flag);

}  // namespace abcd
