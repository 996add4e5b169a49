#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/vector_math.h"

namespace abcd {

TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top_k,
                              std::vector<float>* scratch) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  scratch->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*scratch)[i] = logits[i] - max;
  cpu::ExpArray(scratch->data(), n, scratch->data());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += (*scratch)[i];
  const float log_sum = static_cast<float>(std::log(sum)) + max;
  TokenLogprobs out;
  out.token = token;
  out.logprob = logits[token] - log_sum;
  const int k = static_cast<int>(std::min<int64_t>(std::clamp(top_k, 0, kMaxTopLogprobs), n));
  if (k == 0) return out;
  // The k best by a bounded selection: one pass, k comparisons at most per improvement.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(k) + 1);
  const auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    if (static_cast<int>(best.size()) == k && !better(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, better), i);
    if (static_cast<int>(best.size()) > k) best.pop_back();
  }
  for (int32_t id : best) out.top.emplace_back(id, logits[id] - log_sum);
  return out;
}

}  // namespace abcd
