// Bounds-checked reading of little-endian binary formats (sequence snapshots, session blobs):
// every read says whether enough bytes remained, so a parser of untrusted bytes never reads past
// the end and never allocates from a length it has not checked. Thread-compatible.
#pragma once

#include <cstdint>
#include <cstring>

#include "absl/strings/string_view.h"

namespace abcd {

class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* value) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(value, in_.data(), sizeof(T));  // the engine runs on little-endian hosts only
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetFloats(float* data, int64_t count) {
    if (count < 0 || in_.size() / 4 < static_cast<uint64_t>(count)) return false;
    const size_t bytes = static_cast<size_t>(count) * 4;
    if (bytes == 0) return true;  // `data` may be null (an empty vector): no memcpy
    std::memcpy(data, in_.data(), bytes);
    in_.remove_prefix(bytes);
    return true;
  }
  // The next `bytes` bytes as a view (no copy), or false when fewer remain.
  bool Take(uint64_t bytes, absl::string_view* out) {
    if (in_.size() < bytes) return false;
    *out = in_.substr(0, static_cast<size_t>(bytes));
    in_.remove_prefix(static_cast<size_t>(bytes));
    return true;
  }
  bool Skip(int64_t bytes) {
    if (bytes < 0 || in_.size() < static_cast<uint64_t>(bytes)) return false;
    in_.remove_prefix(static_cast<size_t>(bytes));
    return true;
  }
  size_t remaining() const { return in_.size(); }
  bool done() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

}  // namespace abcd
