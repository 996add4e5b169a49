// Scalar helpers of the fla mixers' gates, in the numerically safe forms.
#pragma once

#include <algorithm>
#include <cmath>

namespace abcd {

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), finite for every finite x.
inline float LogSigmoid(float x) { return std::min(x, 0.0f) - std::log1p(std::exp(-std::fabs(x))); }

// sigmoid(x) without overflow.
inline float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

}  // namespace abcd
