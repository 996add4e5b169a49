// Read-only, memory-mapped view of a HuggingFace safetensors file.
//
// Layout: 8-byte little-endian header length N, N bytes of JSON header mapping tensor names
// to {dtype, shape, data_offsets}, then the raw data section. Open() validates everything a
// malicious or truncated file could get wrong (sizes, offsets, overlaps, dtypes, shapes) and
// reports it as a Status naming the tensor; tensor data is never copied.
//
// Thread-safety: immutable after Open(); safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

enum class DType { kF32, kBF16, kF16, kI32, kI64 };

absl::string_view DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // points into the mapping

  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // The same checks on a copy of a file's bytes held in memory (fuzzing and tests; an exact-size
  // heap buffer, so a sanitizer sees any read past the end); `name` stands for the path.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(
      std::span<const std::byte> bytes, const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // NotFound naming the tensor (and the file) when absent.
  absl::StatusOr<const TensorView*> Get(absl::string_view name) const;
  bool Contains(absl::string_view name) const;
  std::vector<std::string> TensorNames() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  void* mapping_ = nullptr;  // from mmap, or null when the bytes are in owned_
  size_t mapping_size_ = 0;
  std::vector<std::byte> owned_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Decodes any floating dtype to fp32 (bf16/fp16 widen exactly); InvalidArgument for integers.
absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor);
// Decodes I32/I64 tensors to int32 (range-checked).
absl::StatusOr<std::vector<int32_t>> ToInt32(const TensorView& tensor);

}  // namespace abcd
