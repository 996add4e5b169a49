// Micro-batch planning for one iteration: every decoding sequence contributes its one token,
// and prompts still being prefilled share a token budget in admission order (chunked prefill),
// so a long prompt is spread over several iterations instead of stalling running streams.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace abcd {

struct PrefillChunk {
  int index;       // into the `remaining` span
  int64_t tokens;  // prompt tokens to feed this iteration
};

// `remaining`: prompt tokens left per prefilling request, in admission order. At least one
// token is planned whenever something is waiting, even with a zero budget.
std::vector<PrefillChunk> PlanPrefill(std::span<const int64_t> remaining, int64_t token_budget);

}  // namespace abcd
