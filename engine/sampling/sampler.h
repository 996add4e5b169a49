// Next-token selection for one sequence: greedy, temperature, top-k, top-p and repetition
// penalty, driven by a per-request seed so that the same seed and prompt give the same tokens
// no matter what else runs in the batch (each sequence owns its generator).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace abcd {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = all tokens
  float top_p = 1.0f;               // nucleus mass in (0, 1]
  float repetition_penalty = 1.0f;  // > 1 discourages tokens already in the context
  uint64_t seed = 0;
};

// InvalidArgument naming the field (e.g. "sampling.top_p must be in (0, 1], got 1.5").
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `context` holds the prompt and generated ids (for the repetition penalty).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> context);

 private:
  double NextUniform();  // [0, 1), the same sequence on every platform

  SamplingParams params_;
  uint64_t state_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_;
};

}  // namespace abcd
