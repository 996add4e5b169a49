#include "engine/attention/split_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace abcd::cuda {

absl::StatusOr<SplitPlan> PlanSplits(absl::string_view kernel, int64_t items, int64_t blocks,
                                     int sm_count, int min_chunk, int64_t max_chunk) {
  if (items <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(kernel, ": nothing to split (", items, ")"));
  }
  if (max_chunk < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kernel, ": the head does not fit in ",
                                                   kDefaultSharedMemoryBytes,
                                                   " bytes of shared memory"));
  }
  // Enough splits for two blocks per SM, but none smaller than min_chunk items.
  const int64_t target = 2 * static_cast<int64_t>(std::max(sm_count, 1));
  const int64_t most = std::max<int64_t>(items / std::max(min_chunk, 1), 1);
  int64_t splits = 1;
  if (blocks < target)
    splits = std::min((target + blocks - 1) / std::max<int64_t>(blocks, 1), most);
  int64_t chunk = std::min((items + splits - 1) / splits, max_chunk);
  splits = (items + chunk - 1) / chunk;  // every split non-empty
  if (splits > kMaxGridYZ) {
    return absl::InvalidArgumentError(absl::StrCat(kernel, ": ", items, " items in chunks of ",
                                                   chunk, " need ", splits, " splits, more than ",
                                                   kMaxGridYZ));
  }
  return SplitPlan{static_cast<int>(splits), static_cast<int>(chunk)};
}

int64_t MaxChunkForSharedMemory(int64_t fixed_floats, int64_t floats_per_item) {
  const int64_t available = kDefaultSharedMemoryBytes / 4 - fixed_floats;
  if (available <= 0 || floats_per_item <= 0) return 0;
  return available / floats_per_item;
}

int64_t SplitBlocks(int64_t sequences, int n_heads, int64_t longest_run) {
  const int64_t blocks = sequences * n_heads;
  if (longest_run <= 1) return blocks;
  return std::max<int64_t>(blocks / longest_run, n_heads);
}

absl::Status CheckGridRows(absl::string_view kernel, int64_t rows) {
  if (rows <= kMaxGridYZ) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kernel, ": ", rows, " rows in one launch, more than ", kMaxGridYZ));
}

std::vector<int64_t> GraphContextBuckets(int64_t max_context) {
  constexpr int64_t kSmallest = 256;
  std::vector<int64_t> buckets;
  for (int64_t c = kSmallest;; c *= 2) {
    buckets.push_back(std::min(c, max_context));
    if (c >= max_context) break;
  }
  return buckets;
}

size_t GraphContextIndex(const std::vector<int64_t>& buckets, int64_t tokens) {
  size_t index = 0;
  while (index + 1 < buckets.size() && buckets[index] < tokens) ++index;
  return index;
}

}  // namespace abcd::cuda
