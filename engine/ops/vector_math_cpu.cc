#include <cmath>
#include <cstring>

#include "engine/ops/vector_clones.h"
#include "engine/ops/vector_math.h"

namespace abcd::cpu {
namespace {

// exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2] (Cody-Waite),
// exp(r) by its degree-6 Taylor/minimax polynomial (Cephes expf coefficients).
inline float ExpOne(float x) {
  // Branch-free clamp and round-to-nearest (adding and removing 1.5 * 2^23), so the loops
  // vectorise without libm calls. NaN passes the clamp and is returned at the end.
  float clamped = x < -87.5f ? -87.5f : x;
  clamped = clamped > 88.5f ? 88.5f : clamped;
  const float k = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // 2^k: k in [-127, 128]; build it in two halves so 2^-127 and 2^128 stay representable.
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t half = ki / 2;
  const uint32_t b1 = static_cast<uint32_t>(half + 127) << 23;
  const uint32_t b2 = static_cast<uint32_t>(ki - half + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float result = e * s1 * s2;
  result = x < -87.33654f ? 0.0f : result;
  result = x > 88.72283f ? INFINITY : result;
  return x != x ? x : result;
}

}  // namespace

// One pointer, or two that do not overlap: otherwise the vectorised loop's run-time overlap check
// sends an in-place call (x == y, the softmax's) to the scalar loop.
ABCD_VECTOR_CLONES void ExpInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = ExpOne(x[i]);
}

ABCD_VECTOR_CLONES void ExpApart(const float* __restrict x, int64_t n, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ExpOne(x[i]);
}

void ExpArray(const float* x, int64_t n, float* y) {
  if (x == y) {
    ExpInPlace(y, n);
  } else if (x + n <= y || y + n <= x) {
    ExpApart(x, n, y);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = ExpOne(x[i]);  // partial overlap: in order
  }
}

ABCD_VECTOR_CLONES void SiluArray(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + ExpOne(-x[i]));
}

ABCD_VECTOR_CLONES void SiluGateArray(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + ExpOne(-gate[i])) * up[i];
}

ABCD_VECTOR_CLONES void DecayAdd(float* y, float a, float b, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * y[i] + b * x[i];
}

ABCD_VECTOR_CLONES void Axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

ABCD_VECTOR_CLONES float Dot(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums (lane j: the terms i = j mod 8), added pairwise at the end:
  // a fixed order the compiler may vectorise, where one running sum would be a serial chain of
  // scalar adds (a float sum cannot be reordered without -ffast-math).
  constexpr int kLanes = 8;
  float lanes[kLanes] = {};
  const int64_t whole = n - n % kLanes;
  for (int64_t i = 0; i < whole; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  }
  for (int64_t i = whole; i < n; ++i) lanes[0] += a[i] * b[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

ABCD_VECTOR_CLONES void GeluErfInPlace(float* x, int64_t n) {
  // erf(z) = 1 - t (a1 + t (a2 + ...)) exp(-z^2), t = 1 / (1 + p z) for z >= 0 (Abramowitz and
  // Stegun 7.1.26, |error| <= 1.5e-7), odd in z.
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float z = std::fabs(v) * 0.70710678118654752f;
    const float t = 1.0f / (1.0f + 0.3275911f * z);
    float poly = 1.061405429f;
    poly = poly * t - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    const float erf_abs = 1.0f - poly * t * ExpOne(-z * z);
    const float erf = v < 0.0f ? -erf_abs : erf_abs;
    x[i] = 0.5f * v * (1.0f + erf);
  }
}

ABCD_VECTOR_CLONES void Log1pUnitArray(const float* x, int64_t n, float* y) {
  // log(1 + t) = 2 atanh(s), s = t / (2 + t) in [0, 1/3]: an odd series in s converges fast
  // and keeps full relative precision for tiny t.
  for (int64_t i = 0; i < n; ++i) {
    const float t = x[i];
    const float s = t / (2.0f + t);
    const float s2 = s * s;
    float p = 2.0f / 15.0f;
    p = p * s2 + 2.0f / 13.0f;
    p = p * s2 + 2.0f / 11.0f;
    p = p * s2 + 2.0f / 9.0f;
    p = p * s2 + 2.0f / 7.0f;
    p = p * s2 + 2.0f / 5.0f;
    p = p * s2 + 2.0f / 3.0f;
    y[i] = s * (2.0f + s2 * p);
  }
}

namespace {

// sin and cos of x (|x| <= kSinCosRange): the quadrant j = round(x 2/pi), r = x - j pi/2 by
// three-part Cody-Waite (exact for the first two products), the Cephes minimax polynomials on
// [-pi/4, pi/4], and the quadrant's swap and signs as selects.
constexpr float kSinCosRange = 8192.0f;

inline void SinCosOne(float x, float* sin_out, float* cos_out) {
  const float j = (x * 0.63661977236758134f + 12582912.0f) - 12582912.0f;
  float r = x - j * 1.5703125f;
  r = r - j * 4.837512969970703125e-4f;
  r = r - j * 7.54978995489188216e-8f;
  const float z = r * r;
  const float s = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
  const float c =
      ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z -
      0.5f * z + 1.0f;
  const int q = static_cast<int>(j) & 3;
  const float swapped_sin = (q & 1) ? c : s, swapped_cos = (q & 1) ? s : c;
  *sin_out = (q & 2) ? -swapped_sin : swapped_sin;
  *cos_out = ((q + 1) & 2) ? -swapped_cos : swapped_cos;
}

}  // namespace

ABCD_VECTOR_CLONES void SinCosArray(const float* x, int64_t n, float* sin_out, float* cos_out) {
  for (int64_t i = 0; i < n; ++i) SinCosOne(x[i], &sin_out[i], &cos_out[i]);
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(x[i]) <= kSinCosRange)) {  // large, inf or NaN: libm
      sin_out[i] = std::sin(x[i]);
      cos_out[i] = std::cos(x[i]);
    }
  }
}

}  // namespace abcd::cpu
