#include "engine/scheduler/batch_planner.h"

#include <algorithm>

namespace abcd {

std::vector<PrefillChunk> PlanPrefill(std::span<const int64_t> remaining, int64_t token_budget) {
  std::vector<PrefillChunk> chunks;
  int64_t budget = std::max<int64_t>(token_budget, 1);
  for (size_t i = 0; i < remaining.size() && budget > 0; ++i) {
    if (remaining[i] <= 0) continue;
    const int64_t take = std::min(remaining[i], budget);
    chunks.push_back({static_cast<int>(i), take});
    budget -= take;
  }
  return chunks;
}

}  // namespace abcd
