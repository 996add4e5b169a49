// Why a generated sequence ended: max_tokens (length), a stop string, or an end-of-sequence
// token. Shared by the batching Executor and the single-sequence generator.
#pragma once

#include "absl/strings/string_view.h"

namespace abcd {

enum class FinishReason { kLength, kStop, kEos };
// "length", "stop", "eos".
absl::string_view FinishReasonName(FinishReason reason);

}  // namespace abcd
