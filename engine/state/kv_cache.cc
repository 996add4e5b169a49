#include "engine/state/kv_cache.h"

#include <algorithm>

#include "engine/ops/packed_matrix.h"

namespace abcd {

void KvCache::Write(int64_t row, int64_t column, const float* k, const float* v, int64_t count) {
  const size_t at = static_cast<size_t>(row * width + column);
  if (!bf16) {
    std::copy(k, k + count, keys.data() + at);
    std::copy(v, v + count, values.data() + at);
    return;
  }
  for (int64_t c = 0; c < count; ++c) {
    keys16[at + static_cast<size_t>(c)] = FloatToBf16(k[c]);
    values16[at + static_cast<size_t>(c)] = FloatToBf16(v[c]);
  }
}

void KvCache::ReadRows(int64_t rows, float* k, float* v) const {
  const size_t n = static_cast<size_t>(rows * width);
  if (!bf16) {
    std::copy(keys.data(), keys.data() + n, k);
    std::copy(values.data(), values.data() + n, v);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    k[i] = Bf16ToFloat(keys16[i]);
    v[i] = Bf16ToFloat(values16[i]);
  }
}

void KvCache::WriteRows(int64_t rows, const float* k, const float* v) {
  for (int64_t r = 0; r < rows; ++r) Write(r, 0, k + r * width, v + r * width, width);
}

}  // namespace abcd
