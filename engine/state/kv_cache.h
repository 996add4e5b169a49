// Growing key/value cache of one softmax attention layer for one sequence. Rows are written by
// position; capacity is reserved (and accounted) by the StatePool before kernels write.
//
// Rows are fp32, bf16 or f16 (the 16-bit formats halve the bytes and the memory traffic of a
// long-context read; llama.cpp keeps its cache in f16 by default, and f16 keeps 3 more bits of
// mantissa than bf16 for values within its range, +-65504); attention always computes in fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

// The storage format of KvCache rows and of txl's key/value rings.
enum class KvFormat { kF32, kBf16, kF16 };

// "f32", "bf16" or "f16"; anything else is an InvalidArgument error naming `field` (the caller's
// flag or field) and the accepted values.
absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name, absl::string_view field);
inline const char* KvFormatName(KvFormat format) {
  switch (format) {
    case KvFormat::kF32:
      return "f32";
    case KvFormat::kBf16:
      return "bf16";
    case KvFormat::kF16:
      return "f16";
  }
  return "?";
}
// Bytes of one stored value.
inline int64_t KvValueBytes(KvFormat format) { return format == KvFormat::kF32 ? 4 : 2; }

struct KvCache {
  int64_t width = 0;   // values per key row (= d_model); value rows have the same width
  int64_t length = 0;  // rows in use
  KvFormat format = KvFormat::kF32;        // of the rows below; fixed before the first Resize
  std::vector<float> keys, values;         // fp32 storage [capacity, width]
  std::vector<uint16_t> keys16, values16;  // bf16 or f16 bit patterns [capacity, width]

  bool half() const { return format != KvFormat::kF32; }  // held in keys16 / values16
  int64_t capacity() const {
    if (width == 0) return 0;
    return static_cast<int64_t>(half() ? keys16.size() : keys.size()) / width;
  }
  int64_t bytes_per_row() const { return 2 * width * KvValueBytes(format); }
  // Bytes of storage held (the vectors' capacities, which may exceed capacity() rows).
  int64_t storage_bytes() const {
    return static_cast<int64_t>((keys.capacity() + values.capacity()) * sizeof(float) +
                                (keys16.capacity() + values16.capacity()) * sizeof(uint16_t));
  }
  // No rows, storage kept (for reuse by another sequence).
  void Empty() {
    length = 0;
    keys.clear();
    values.clear();
    keys16.clear();
    values16.clear();
  }
  // Grows (or shrinks) the storage to `rows` rows; rows below keep their contents.
  void Resize(int64_t rows) {
    const size_t n = static_cast<size_t>(rows * width);
    if (half()) {
      keys16.resize(n);
      values16.resize(n);
    } else {
      keys.resize(n);
      values.resize(n);
    }
  }
  // Writes `count` values of row `row` from column `column` on (rounded to nearest even for
  // bf16 and f16; f16 overflows to infinity beyond +-65504).
  void Write(int64_t row, int64_t column, const float* k, const float* v, int64_t count);
  // Copies rows [0, rows) out as fp32, or in from fp32.
  void ReadRows(int64_t rows, float* k, float* v) const;
  void WriteRows(int64_t rows, const float* k, const float* v);
  // The same over a flat range of one side's storage, values [first, first + count) of the
  // keys (or of the values) row after row: snapshots copy a cache a block at a time.
  void ReadFlat(bool value_side, int64_t first, int64_t count, float* out) const;
  void WriteFlat(bool value_side, int64_t first, int64_t count, const float* in);
};

}  // namespace abcd
