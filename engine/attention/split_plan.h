// Launch geometry of the split-K attention kernels (*_cuda.cu): how many blocks share one
// (row, head), and how many items (abc slots, rfa/t2r/elu features, softmax cached tokens)
// each takes. Host-only, so the limits it enforces are tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd::cuda {

// Dynamic shared memory a block may use without a per-kernel opt-in, on every GPU we build for.
inline constexpr int64_t kDefaultSharedMemoryBytes = 48 * 1024;
// CUDA's limit on a grid's y and z dimensions.
inline constexpr int64_t kMaxGridYZ = 65535;

struct SplitPlan {
  int splits = 1;  // blocks per (row, head); every one gets at least one item
  int chunk = 0;   // items per block (the last may get fewer)
};

// Splits `items` per head so that `blocks` (rows x heads before splitting) fills `sm_count`
// SMs twice over, with at least `min_chunk` items per block where there are enough items, and
// never more than `max_chunk` (what fits the block's shared memory), which wins over both.
// InvalidArgument naming `kernel` when not even one item fits or the splits exceed the grid.
absl::StatusOr<SplitPlan> PlanSplits(absl::string_view kernel, int64_t items, int64_t blocks,
                                     int sm_count, int min_chunk, int64_t max_chunk);

// Blocks a launch has before splitting, as the split choice should see them: sequences x heads
// in decode mode (longest_run <= 1); in a scan, the blocks divided by the longest run (never
// fewer than the heads), so a long prompt chunk, the pass's critical path, is split as if it
// were nearly alone even beside many decode rows, while many short runs still count as a full
// grid.
int64_t SplitBlocks(int64_t sequences, int n_heads, int64_t longest_run);

// The most items whose `floats_per_item` shared floats fit in the default shared memory next
// to `fixed_floats` (0 when even the fixed part does not fit).
int64_t MaxChunkForSharedMemory(int64_t fixed_floats, int64_t floats_per_item);

// InvalidArgument naming `kernel` when `rows` blocks would exceed the grid's y dimension.
absl::Status CheckGridRows(absl::string_view kernel, int64_t rows);

// Context buckets of softmax models' CUDA graphs (a split-K grid is sized by the tokens it may
// attend over): 256, 512, ... doubling, the last one max_context itself.
std::vector<int64_t> GraphContextBuckets(int64_t max_context);
// The smallest bucket that holds `tokens` (a step's longest context, its own token included);
// the last one when none does.
size_t GraphContextIndex(const std::vector<int64_t>& buckets, int64_t tokens);

}  // namespace abcd::cuda
