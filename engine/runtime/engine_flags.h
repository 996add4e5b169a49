// The engine's flag values checked from their text, for a frontend that parses its flags
// without the engine's internal headers (server/core/server_config.cc). Each delegates to the
// parser declared next to its enum (named below), so the accepted values and the messages are
// those of the engine; every error is INVALID_ARGUMENT naming `flag`.
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace abcd {

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
// "fp32", "bf16" (where this CPU has AVX512_BF16) or "int8" (where it has AVX-512 VNNI): the CPU
// products (cpu::LinearProducts, engine/ops/cpu_context.h; support: engine/ops/matmul.h).
absl::Status CheckCpuComputeFlag(absl::string_view value, absl::string_view flag);

}  // namespace abcd
