#include "engine/state/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/ops/packed_matrix.h"

namespace abcd {

absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name, absl::string_view field) {
  if (name == "f32") return KvFormat::kF32;
  if (name == "bf16") return KvFormat::kBf16;
  if (name == "f16") return KvFormat::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be f32, bf16 or f16, got \"", name.substr(0, 64), "\""));
}

void KvCache::Write(int64_t row, int64_t column, const float* k, const float* v, int64_t count) {
  const size_t at = static_cast<size_t>(row * width + column);
  if (!half()) {
    std::copy(k, k + count, keys.data() + at);
    std::copy(v, v + count, values.data() + at);
    return;
  }
  uint16_t (*const to)(float) = format == KvFormat::kBf16 ? FloatToBf16 : FloatToHalf;
  for (int64_t c = 0; c < count; ++c) {
    keys16[at + static_cast<size_t>(c)] = to(k[c]);
    values16[at + static_cast<size_t>(c)] = to(v[c]);
  }
}

void KvCache::ReadRows(int64_t rows, float* k, float* v) const {
  const size_t n = static_cast<size_t>(rows * width);
  if (!half()) {
    std::copy(keys.data(), keys.data() + n, k);
    std::copy(values.data(), values.data() + n, v);
    return;
  }
  float (*const from)(uint16_t) = format == KvFormat::kBf16 ? Bf16ToFloat : HalfToFloatValue;
  for (size_t i = 0; i < n; ++i) {
    k[i] = from(keys16[i]);
    v[i] = from(values16[i]);
  }
}

void KvCache::WriteRows(int64_t rows, const float* k, const float* v) {
  for (int64_t r = 0; r < rows; ++r) Write(r, 0, k + r * width, v + r * width, width);
}

}  // namespace abcd
