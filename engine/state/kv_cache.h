// Growing key/value cache of one softmax attention layer for one sequence. Rows are written by
// position; capacity is reserved (and accounted) by the StatePool before kernels write.
//
// Rows are fp32 or bf16 (half the bytes and half the memory traffic of a long-context read, as
// llama.cpp keeps its cache in f16 by default); attention always computes in fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace abcd {

struct KvCache {
  int64_t width = 0;   // values per key row (= d_model); value rows have the same width
  int64_t length = 0;  // rows in use
  bool bf16 = false;   // storage format of the rows below; fixed before the first Resize
  std::vector<float> keys, values;         // fp32 storage [capacity, width]
  std::vector<uint16_t> keys16, values16;  // bf16 storage [capacity, width]

  int64_t capacity() const {
    if (width == 0) return 0;
    return static_cast<int64_t>(bf16 ? keys16.size() : keys.size()) / width;
  }
  int64_t bytes_per_row() const { return 2 * width * (bf16 ? 2 : 4); }
  // Grows (or shrinks) the storage to `rows` rows; rows below keep their contents.
  void Resize(int64_t rows) {
    const size_t n = static_cast<size_t>(rows * width);
    if (bf16) {
      keys16.resize(n);
      values16.resize(n);
    } else {
      keys.resize(n);
      values.resize(n);
    }
  }
  // Writes `count` values of row `row` from column `column` on (rounded to nearest even for
  // bf16).
  void Write(int64_t row, int64_t column, const float* k, const float* v, int64_t count);
  // Copies rows [0, rows) out as fp32 (snapshots), or in from fp32.
  void ReadRows(int64_t rows, float* k, float* v) const;
  void WriteRows(int64_t rows, const float* k, const float* v);
};

}  // namespace abcd
