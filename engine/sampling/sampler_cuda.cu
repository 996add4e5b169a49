#include <curand_philox4x32_x.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/util_type.cuh>

#include "absl/strings/str_cat.h"
#include "engine/sampling/sampler_cuda.h"

namespace abcd::cuda {
namespace {

// Selection: one block per row, reading sorted entries in tiles of kSelectTile.
constexpr int kSelectThreads = 256;
constexpr int kItemsPerThread = 16;
constexpr int kSelectTile = kSelectThreads * kItemsPerThread;
constexpr int kPrepareThreads = 256;
constexpr size_t kWorkspaceAlignment = 256;
constexpr int kNoIndex = INT32_MAX;          // "no entry found" in index reductions
constexpr int kKeyBits = 8 * sizeof(float);  // the radix sort orders whole float keys

// Greedy rows (and top_k == 1, which keeps only the argmax) skip the sort.
__host__ __device__ bool IsGreedy(const DeviceSamplingParams& params) {
  return !(params.temperature > 0.0f) || params.top_k == 1;
}

// The value a logit is ordered by: NaN counts as -inf, and -0 as +0 (the CPU compares them
// equal, so ties between them must go to the lowest id; a radix sort would order -0 below +0).
__device__ float OrderKey(float logit) {
  if (isnan(logit)) return -INFINITY;
  return logit == 0.0f ? 0.0f : logit;
}

// exp((logit - max) / temperature): the unnormalised probability (in (0, 1] for finite logits).
__device__ double Weight(float key, float max_key, float temperature) {
  return static_cast<double>(expf((key - max_key) / temperature));
}

// A uniform double in [0, 1) with 53 random bits: Philox4x32-10 with the step as the counter
// and the seed as the key, so every (seed, step) pair has its own independent draw.
__device__ double UniformDraw(uint64_t seed, uint64_t step) {
  const uint4 counter =
      make_uint4(static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u);
  const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint4 bits = curand_Philox4x32_10(counter, key);
  const uint64_t mantissa = (static_cast<uint64_t>(bits.x) << 21) | (bits.y >> 11);
  return static_cast<double>(mantissa) * 0x1.0p-53;
}

struct ArgMax {
  float value;
  int index;  // -1: nothing seen yet
};

// The larger value, ties to the lower index: a total order, so the reduction is exact and
// independent of the reduction tree.
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if (a.value > b.value || (a.value == b.value && a.index < b.index)) return a;
    return b;
  }
};

struct MinIndexOp {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};

using TileLoad =
    cub::BlockLoad<float, kSelectThreads, kItemsPerThread, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
using TileScan = cub::BlockScan<double, kSelectThreads>;
using SumReduce = cub::BlockReduce<double, kSelectThreads>;
using IndexReduce = cub::BlockReduce<int, kSelectThreads>;
using ArgMaxReduce = cub::BlockReduce<ArgMax, kSelectThreads>;

// Shared memory of the selection kernel: the CUB scratch is a union (one collective at a time,
// with a barrier between two), plus two broadcast slots.
struct SelectShared {
  union {
    typename TileLoad::TempStorage load;
    typename TileScan::TempStorage scan;
    typename SumReduce::TempStorage sum;
    typename IndexReduce::TempStorage index;
    typename ArgMaxReduce::TempStorage argmax;
  } storage;
  double value;
  int index;
};

struct PrefixHit {
  int index;      // the first index whose prefix reached the threshold, or kNoIndex
  double prefix;  // the inclusive prefix sum at `index`
};

// Scans the weights of keys[0, count) in order and returns the first index whose inclusive
// prefix sum is >= threshold (kStrict: > threshold). Deterministic: the same arguments give
// the same prefix sums bit for bit, so a second scan agrees with the first. Every thread of
// the block must call it; it ends with a barrier.
template <bool kStrict>
__device__ PrefixHit FindFirstPrefix(const float* keys, int count, float max_key, float temperature,
                                     double threshold, SelectShared& shared) {
  double carry = 0.0;
  for (int base = 0; base < count; base += kSelectTile) {
    const int valid = min(kSelectTile, count - base);
    float tile_keys[kItemsPerThread];
    TileLoad(shared.storage.load).Load(keys + base, tile_keys, valid, -INFINITY);
    __syncthreads();
    const int first = base + static_cast<int>(threadIdx.x) * kItemsPerThread;
    double prefixes[kItemsPerThread];  // the weights, scanned in place
#pragma unroll
    for (int j = 0; j < kItemsPerThread; ++j) {
      prefixes[j] = first + j < count ? Weight(tile_keys[j], max_key, temperature) : 0.0;
    }
    double tile_sum;
    TileScan(shared.storage.scan).InclusiveSum(prefixes, prefixes, tile_sum);
    // Prefix sums of non-negative weights may still dip by a rounding step between threads,
    // so the first hit is the minimum index over all threads, not a search on a monotone run.
    int hit = kNoIndex;
    double hit_prefix = 0.0;
#pragma unroll
    for (int j = 0; j < kItemsPerThread; ++j) {
      const double prefix = carry + prefixes[j];
      const bool reached = kStrict ? prefix > threshold : prefix >= threshold;
      if (hit == kNoIndex && first + j < count && reached) {
        hit = first + j;
        hit_prefix = prefix;
      }
    }
    __syncthreads();
    const int tile_hit = IndexReduce(shared.storage.index).Reduce(hit, MinIndexOp{});
    if (threadIdx.x == 0) shared.index = tile_hit;
    __syncthreads();
    const int found = shared.index;
    if (found != kNoIndex) {
      if (hit == found) shared.value = hit_prefix;
      __syncthreads();
      const PrefixHit result{found, shared.value};
      __syncthreads();
      return result;
    }
    carry += tile_sum;
  }
  return PrefixHit{kNoIndex, carry};
}

// Fills the sort input of a chunk of rows: keys (OrderKey of the logits) and ids (column
// indices) for the rows that sample, and their segments [row * vocab, (row + 1) * vocab).
// Greedy rows get an empty segment and no keys. grid.x strides columns, grid.y rows.
__global__ void PrepareSortKernel(const float* __restrict__ logits, int64_t rows, int64_t vocab,
                                  const DeviceSamplingParams* __restrict__ params,
                                  float* __restrict__ keys, int32_t* __restrict__ ids,
                                  int* __restrict__ segment_begin, int* __restrict__ segment_end) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const bool greedy = IsGreedy(params[row]);
    const int64_t offset = row * vocab;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      segment_begin[row] = static_cast<int>(offset);
      segment_end[row] = static_cast<int>(greedy ? offset : offset + vocab);
    }
    if (greedy) continue;
    for (int64_t column = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         column < vocab; column += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      keys[offset + column] = OrderKey(logits[offset + column]);
      ids[offset + column] = static_cast<int32_t>(column);
    }
  }
}

// One block per row of a chunk. Greedy rows: argmax of the logits. Sampling rows: keys/ids are
// the row's logits sorted descending (stable, so equal logits keep ascending ids).
__global__ void __launch_bounds__(kSelectThreads)
    SelectTokensKernel(const float* __restrict__ logits, int64_t vocab,
                       const DeviceSamplingParams* __restrict__ params,
                       const float* __restrict__ sorted_keys,
                       const int32_t* __restrict__ sorted_ids, int32_t* __restrict__ tokens) {
  __shared__ SelectShared shared;
  const int64_t row = blockIdx.x;
  const DeviceSamplingParams p = params[row];
  const int count = static_cast<int>(vocab);

  if (IsGreedy(p)) {
    const float* row_logits = logits + row * vocab;
    ArgMax best{-INFINITY, -1};
    for (int i = static_cast<int>(threadIdx.x); i < count; i += kSelectThreads) {
      const float value = OrderKey(row_logits[i]);
      if (best.index < 0 || value > best.value) best = ArgMax{value, i};  // ascending i
    }
    best = ArgMaxReduce(shared.storage.argmax).Reduce(best, ArgMaxOp{});
    if (threadIdx.x == 0) tokens[row] = best.index;
    return;
  }

  const float* keys = sorted_keys + row * vocab;
  const int32_t* ids = sorted_ids + row * vocab;
  const float max_key = keys[0];
  if (!isfinite(max_key)) {  // all -inf (or NaN), or an +inf logit: it alone is "certain"
    if (threadIdx.x == 0) tokens[row] = ids[0];
    return;
  }
  const int keep = p.top_k > 0 && p.top_k < count ? p.top_k : count;

  // The softmax normaliser over the top-k entries.
  double partial = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < keep; i += kSelectThreads) {
    partial += Weight(keys[i], max_key, p.temperature);
  }
  const double block_total = SumReduce(shared.storage.sum).Sum(partial);
  if (threadIdx.x == 0) shared.value = block_total;
  __syncthreads();
  const double total = shared.value;
  __syncthreads();

  // The nucleus: the smallest prefix whose mass reaches top_p (as the CPU: mass >= top_p).
  int kept = keep;
  double kept_total = total;
  if (p.top_p < 1.0f) {
    const PrefixHit cut = FindFirstPrefix<false>(keys, keep, max_key, p.temperature,
                                                 static_cast<double>(p.top_p) * total, shared);
    if (cut.index != kNoIndex) {
      kept = cut.index + 1;
      kept_total = cut.prefix;
    }
  }

  // Inverse CDF: the first entry whose prefix exceeds u * mass (the CPU's `target < 0`). The
  // scan covers the same `keep` entries as the nucleus scan, so its prefixes are identical and
  // the hit lies inside the nucleus; the clamp only guards against u * mass rounding up.
  const double target = UniformDraw(p.seed, p.step) * kept_total;
  const PrefixHit draw = FindFirstPrefix<true>(keys, keep, max_key, p.temperature, target, shared);
  const int chosen = draw.index < kept ? draw.index : kept - 1;
  if (threadIdx.x == 0) tokens[row] = ids[chosen];
}

size_t AlignUp(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Where each buffer of one sort chunk lives in the context workspace (byte offsets).
struct SortPlan {
  int64_t chunk_rows = 0;
  size_t keys[2] = {0, 0};
  size_t ids[2] = {0, 0};
  size_t segment_begin = 0;
  size_t segment_end = 0;
  size_t cub = 0;
  size_t cub_bytes = 0;
  size_t total = 0;
};

absl::Status CheckShape(int64_t rows, int64_t vocab) {
  if (rows < 0) return absl::InvalidArgumentError(absl::StrCat("SampleTokens rows ", rows));
  if (vocab < 1 || vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("SampleTokens vocab must be in [1, 2^31), got ", vocab));
  }
  return absl::OkStatus();
}

// CUB's scratch for sorting `chunk_rows` segments of `vocab` float/int32 pairs in place.
absl::StatusOr<size_t> CubSortBytes(int64_t chunk_rows, int64_t vocab) {
  cub::DoubleBuffer<float> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> ids(nullptr, nullptr);
  size_t bytes = 0;
  const int* no_offsets = nullptr;
  absl::Status status =
      Check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                nullptr, bytes, keys, ids, static_cast<int>(chunk_rows * vocab),
                static_cast<int>(chunk_rows), no_offsets, no_offsets, 0, kKeyBits),
            "cub::DeviceSegmentedRadixSort (size query)");
  if (!status.ok()) return status;
  return bytes;
}

absl::StatusOr<SortPlan> PlanSort(int64_t rows, int64_t vocab) {
  SortPlan plan;
  plan.chunk_rows =
      std::clamp<int64_t>(kSampleSortChunkItems / vocab, 1, std::max<int64_t>(rows, 1));
  absl::StatusOr<size_t> cub_bytes = CubSortBytes(plan.chunk_rows, vocab);
  if (!cub_bytes.ok()) return cub_bytes.status();
  plan.cub_bytes = *cub_bytes;
  if (const int64_t last_rows = rows % plan.chunk_rows; last_rows != 0) {
    cub_bytes = CubSortBytes(last_rows, vocab);
    if (!cub_bytes.ok()) return cub_bytes.status();
    plan.cub_bytes = std::max(plan.cub_bytes, *cub_bytes);
  }
  const size_t items = static_cast<size_t>(plan.chunk_rows * vocab);
  const size_t offsets = static_cast<size_t>(plan.chunk_rows) * sizeof(int);
  size_t end = 0;
  auto place = [&end](size_t bytes) {
    const size_t start = end;
    end += AlignUp(std::max<size_t>(bytes, 1));
    return start;
  };
  plan.keys[0] = place(items * sizeof(float));
  plan.keys[1] = place(items * sizeof(float));
  plan.ids[0] = place(items * sizeof(int32_t));
  plan.ids[1] = place(items * sizeof(int32_t));
  plan.segment_begin = place(offsets);
  plan.segment_end = place(offsets);
  plan.cub = place(plan.cub_bytes);
  plan.total = end;
  return plan;
}

}  // namespace

absl::StatusOr<size_t> SampleTokensWorkspaceBytes(int64_t rows, int64_t vocab) {
  if (absl::Status status = CheckShape(rows, vocab); !status.ok()) return status;
  if (rows == 0) return size_t{0};
  absl::StatusOr<SortPlan> plan = PlanSort(rows, vocab);
  if (!plan.ok()) return plan.status();
  return plan->total;
}

absl::Status SampleTokens(CudaContext& context, const float* logits, int64_t rows, int64_t vocab,
                          const DeviceSamplingParams* params, int32_t* tokens) {
  if (absl::Status status = CheckShape(rows, vocab); !status.ok()) return status;
  if (rows == 0) return absl::OkStatus();
  absl::StatusOr<SortPlan> plan = PlanSort(rows, vocab);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<void*> workspace = context.Workspace(plan->total);
  if (!workspace.ok()) return workspace.status();
  char* base = static_cast<char*>(*workspace);
  float* keys[2] = {reinterpret_cast<float*>(base + plan->keys[0]),
                    reinterpret_cast<float*>(base + plan->keys[1])};
  int32_t* ids[2] = {reinterpret_cast<int32_t*>(base + plan->ids[0]),
                     reinterpret_cast<int32_t*>(base + plan->ids[1])};
  int* segment_begin = reinterpret_cast<int*>(base + plan->segment_begin);
  int* segment_end = reinterpret_cast<int*>(base + plan->segment_end);
  void* cub_scratch = base + plan->cub;

  const cudaStream_t stream = context.stream();
  for (int64_t first = 0; first < rows; first += plan->chunk_rows) {
    const int64_t chunk_rows = std::min(plan->chunk_rows, rows - first);
    const float* chunk_logits = logits + first * vocab;
    const DeviceSamplingParams* chunk_params = params + first;

    const int64_t column_blocks = (vocab + kPrepareThreads - 1) / kPrepareThreads;
    const dim3 prepare_grid(static_cast<unsigned>(std::min<int64_t>(column_blocks, 128)),
                            static_cast<unsigned>(std::min<int64_t>(chunk_rows, 1024)));
    PrepareSortKernel<<<prepare_grid, kPrepareThreads, 0, stream>>>(
        chunk_logits, chunk_rows, vocab, chunk_params, keys[0], ids[0], segment_begin, segment_end);
    if (absl::Status status = CheckLaunch("PrepareSortKernel"); !status.ok()) return status;

    // The sort flips between the two buffers of each pair; Current() names the sorted one.
    cub::DoubleBuffer<float> sort_keys(keys[0], keys[1]);
    cub::DoubleBuffer<int32_t> sort_ids(ids[0], ids[1]);
    size_t cub_bytes = plan->cub_bytes;
    absl::Status status =
        Check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
                  cub_scratch, cub_bytes, sort_keys, sort_ids, static_cast<int>(chunk_rows * vocab),
                  static_cast<int>(chunk_rows), segment_begin, segment_end, 0, kKeyBits, stream),
              "cub::DeviceSegmentedRadixSort");
    if (!status.ok()) return status;

    SelectTokensKernel<<<static_cast<unsigned>(chunk_rows), kSelectThreads, 0, stream>>>(
        chunk_logits, vocab, chunk_params, sort_keys.Current(), sort_ids.Current(), tokens + first);
    if (status = CheckLaunch("SelectTokensKernel"); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace abcd::cuda
