#include "engine/runtime/engine_flags.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_factory.h"
#include "engine/ops/matmul.h"
#include "engine/ops/packed_matrix.h"
#include "engine/scheduler/batch_planner.h"
#include "engine/scheduler/speculation.h"
#include "engine/state/kv_cache.h"

namespace abcd {

absl::Status CheckPrefillPolicyFlag(absl::string_view value, absl::string_view flag) {
  return ParsePrefillPolicy(value, flag).status();
}

absl::Status CheckDeviceFlag(absl::string_view value, absl::string_view flag) {
  return ParseDevice(value, flag).status();
}

absl::Status CheckDeviceWeightsFlag(absl::string_view value, absl::string_view flag) {
  return ValidateDeviceWeightType(value, flag);
}

absl::Status CheckKvFormatFlag(absl::string_view value, absl::string_view flag) {
  return ParseKvFormat(value, flag).status();
}

absl::Status CheckSpeculativeFlag(absl::string_view value, absl::string_view flag) {
  return ParseSpeculativeFlag(value, flag).status();
}

absl::Status CheckWeightFormatFlag(absl::string_view value, absl::string_view flag) {
  absl::StatusOr<WeightFormat> format = ParseWeightFormat(value);
  if (format.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", format.status().message()));
}

absl::Status CheckCpuComputeFlag(absl::string_view value, absl::string_view flag) {
  if (value != "auto" && value != "fp32" && value != "bf16" && value != "int8") {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be auto, fp32, bf16 or int8, got \"", value.substr(0, 64), "\""));
  }
  if (value == "bf16" && !cpu::Bf16ProductsSupported()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag,
                     " bf16 needs a CPU with AVX-512 BF16 dot products (AVX512_BF16); this one "
                     "has none"));
  }
  if (value == "int8" && !cpu::W8A8Supported()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag,
                     " int8 needs a CPU with AVX-512 VNNI (AVX512BW and AVX512_VNNI); this one "
                     "has none"));
  }
  return absl::OkStatus();
}

absl::StatusOr<cpu::LinearProducts> ResolveCpuCompute(absl::string_view value, WeightFormat weights,
                                                      absl::string_view flag,
                                                      absl::string_view model,
                                                      absl::string_view weight_flag) {
  if (absl::Status checked = CheckCpuComputeFlag(value, flag); !checked.ok()) return checked;
  if (value == "auto") {
    return weights == WeightFormat::kBF16 && cpu::Bf16ProductsSupported()
               ? cpu::LinearProducts::kBf16
               : cpu::LinearProducts::kFloat32;
  }
  if (value == "fp32") return cpu::LinearProducts::kFloat32;
  const bool bf16 = value == "bf16";
  const WeightFormat needed = bf16 ? WeightFormat::kBF16 : WeightFormat::kInt8;
  if (weights != needed) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", value, " multiplies ", value, " weights, and ",
                     model.empty() ? std::string("this model") : absl::StrCat("model ", model),
                     " keeps ", WeightFormatName(weights), " (add ", weight_flag, " ", value, ")"));
  }
  return bf16 ? cpu::LinearProducts::kBf16 : cpu::LinearProducts::kInt8;
}

}  // namespace abcd
