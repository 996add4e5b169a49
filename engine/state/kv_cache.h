// Growing key/value cache of one softmax attention layer for one sequence. Rows are appended
// in order; capacity is reserved (and accounted) by the StatePool before kernels append.
#pragma once

#include <cstdint>
#include <vector>

namespace abcd {

struct KvCache {
  int64_t width = 0;          // floats per key row (= d_model); value rows have the same width
  int64_t length = 0;         // rows in use
  std::vector<float> keys;    // [capacity, width]
  std::vector<float> values;  // [capacity, width]

  int64_t capacity() const { return width == 0 ? 0 : static_cast<int64_t>(keys.size()) / width; }
  float* key(int64_t row) { return keys.data() + row * width; }
  float* value(int64_t row) { return values.data() + row * width; }
  const float* key(int64_t row) const { return keys.data() + row * width; }
  const float* value(int64_t row) const { return values.data() + row * width; }
};

}  // namespace abcd
