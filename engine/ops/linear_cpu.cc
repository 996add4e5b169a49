#include <cblas.h>

#include <algorithm>

#include "engine/ops/linear.h"

namespace abcd::cpu {

void Linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias,
            int64_t out, float* y) {
  if (rows == 0 || out == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + out, y + r * out);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(out), static_cast<int>(in), 1.0f, x, static_cast<int>(in), w,
              static_cast<int>(in), beta, y, static_cast<int>(out));
}

}  // namespace abcd::cpu
