// Log-probabilities of tokens under the model's next-token distribution, for OpenAI's
// `logprobs` (each generated token's log-probability and the k most likely alternatives) and
// `echo` with logprobs (the prompt's tokens scored). They are taken from the raw logits
// (log_softmax), before temperature, top-k/top-p or the repetition penalty reshape the
// distribution for sampling, so they do not depend on the sampling settings.
// Thread-compatible: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace abcd {

inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  // The most likely tokens, most likely first (ties: lower id first); `top_k` of them.
  std::vector<std::pair<int32_t, float>> top;
};

// `logits`: one row of vocab_size values; `token` in [0, vocab_size); top_k in [0,
// kMaxTopLogprobs]. `scratch` is reused between calls.
TokenLogprobs ComputeLogprobs(std::span<const float> logits, int32_t token, int top_k,
                              std::vector<float>* scratch);

}  // namespace abcd
