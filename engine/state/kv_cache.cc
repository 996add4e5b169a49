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

void KvCache::ReadFlat(bool value_side, int64_t first, int64_t count, float* out) const {
  const size_t at = static_cast<size_t>(first), n = static_cast<size_t>(count);
  if (!half()) {
    const std::vector<float>& side = value_side ? values : keys;
    std::copy(side.data() + at, side.data() + at + n, out);
  } else if (format == KvFormat::kBf16) {
    Bf16sToFloats((value_side ? values16 : keys16).data() + at, n, out);
  } else {
    HalvesToFloats((value_side ? values16 : keys16).data() + at, n, out);
  }
}

void KvCache::WriteFlat(bool value_side, int64_t first, int64_t count, const float* in) {
  const size_t at = static_cast<size_t>(first), n = static_cast<size_t>(count);
  if (!half()) {
    std::copy(in, in + n, (value_side ? values : keys).data() + at);
  } else if (format == KvFormat::kBf16) {
    FloatsToBf16s(in, n, (value_side ? values16 : keys16).data() + at);
  } else {
    FloatsToHalves(in, n, (value_side ? values16 : keys16).data() + at);
  }
}

void KvCache::Write(int64_t row, int64_t column, const float* k, const float* v, int64_t count) {
  const int64_t at = row * width + column;
  WriteFlat(false, at, count, k);
  WriteFlat(true, at, count, v);
}

void KvCache::ReadRows(int64_t rows, float* k, float* v) const {
  ReadFlat(false, 0, rows * width, k);
  ReadFlat(true, 0, rows * width, v);
}

void KvCache::WriteRows(int64_t rows, const float* k, const float* v) {
  WriteFlat(false, 0, rows * width, k);
  WriteFlat(true, 0, rows * width, v);
}

}  // namespace abcd
