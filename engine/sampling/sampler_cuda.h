// Batched next-token selection on the device (the CUDA twin of sampler.h): one launch sequence
// turns a [rows, vocab] logits matrix into `rows` token ids, so only the ids cross to the host.
//
// Semantics per row, as the CPU Sampler:
//   * temperature 0 (or top_k 1): argmax, ties to the lowest id (std::max_element's rule);
//   * otherwise softmax(logits / temperature) over the top_k highest logits (0 = all; ties by
//     lowest id), then the smallest prefix of that descending order whose probability mass is
//     >= top_p, renormalised, and one inverse-CDF draw from it.
// The repetition penalty is not applied here: the caller applies it to the logits (on the
// host, or with its own kernel) before calling SampleTokens. Parameters are assumed valid
// (ValidateSamplingParams); NaN logits count as -inf.
//
// Randomness: one Philox4x32-10 block per draw, keyed by the row's seed with the row's step as
// the counter, so a token depends only on its own row's logits, parameters and step, never on
// the batch it shares a launch with. The caller advances `step` once per generated token
// (e.g. the number of tokens the sequence has generated). The stream differs from the CPU
// Sampler's splitmix64, so sampled (non-greedy) tokens differ between backends; greedy ones
// are identical.
//
// Cost: non-greedy rows are ordered by a CUB segmented radix sort (stable, 32-bit float keys,
// O(vocab) work per row, one thread block per row, so a batch of a few rows with a very large
// vocabulary leaves most SMs idle); greedy rows get an empty segment and cost one argmax pass.
// Selection then reads a row's top_k entries (all when top_k = 0) once for the softmax
// normaliser and scans the sorted prefix up to the nucleus cut and up to the drawn entry, in
// O(cut / 4096) block-wide steps. Rows are processed in chunks of at most kSampleSortChunkItems
// logits (one row when vocab is larger), so the scratch space is bounded; see
// SampleTokensWorkspaceBytes.
//
// CUDA graphs: whether a row is greedy is decided on the device, so one captured launch serves
// any mix of parameters, provided the context workspace already holds
// SampleTokensWorkspaceBytes(rows, vocab) when the capture starts (Workspace() cannot grow
// during a capture).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/device/cuda_context.h"
#include "engine/sampling/sampler.h"

namespace abcd::cuda {

// Per-row sampling parameters, uploaded as a device array of `rows` entries.
struct DeviceSamplingParams {
  float temperature;  // 0 = greedy
  int top_k;          // 0 = all tokens
  float top_p;        // nucleus mass in (0, 1]
  uint64_t seed;      // the request's seed
  uint64_t step;      // the draw's index within the request: advance once per token
};

// The device parameters of a request's `step`-th draw.
inline DeviceSamplingParams MakeDeviceSamplingParams(const SamplingParams& params, uint64_t step) {
  return DeviceSamplingParams{params.temperature, params.top_k, params.top_p, params.seed, step};
}

// Logits sorted per launch chunk: 2^24 (16M) keeps the workspace at about 256 MiB at most.
inline constexpr int64_t kSampleSortChunkItems = int64_t{1} << 24;

// The context workspace SampleTokens needs for this shape (sort buffers and CUB's scratch),
// so callers can grow it ahead of time (e.g. before capturing a CUDA graph).
absl::StatusOr<size_t> SampleTokensWorkspaceBytes(int64_t rows, int64_t vocab);

// logits: [rows, vocab] device; params: [rows] device; tokens: [rows] device (written).
// Enqueues on context.stream() and uses context.Workspace(); vocab must be in [1, 2^31).
absl::Status SampleTokens(CudaContext& context, const float* logits, int64_t rows, int64_t vocab,
                          const DeviceSamplingParams* params, int32_t* tokens);

}  // namespace abcd::cuda
