// libFuzzer target: the safetensors loader on arbitrary bytes (SafetensorsFile::FromBytes, an
// exact-size heap copy, so ASan sees any read past the end). Every accepted tensor is decoded.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  absl::StatusOr<std::unique_ptr<abcd::SafetensorsFile>> file =
      abcd::SafetensorsFile::FromBytes(bytes, "fuzz.safetensors");
  if (!file.ok()) {
    ABCD_FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(!file.status().message().empty());
    return 0;
  }
  for (const std::string& name : (*file)->TensorNames()) {
    absl::StatusOr<const abcd::TensorView*> tensor = (*file)->Get(name);
    ABCD_FUZZ_CHECK(tensor.ok());
    const abcd::TensorView& view = **tensor;
    ABCD_FUZZ_CHECK(view.bytes.size() ==
                    static_cast<size_t>(view.num_elements()) * abcd::DTypeSize(view.dtype));
    if (view.dtype == abcd::DType::kI32 || view.dtype == abcd::DType::kI64) {
      absl::StatusOr<std::vector<int32_t>> values = abcd::ToInt32(view);
      ABCD_FUZZ_CHECK(!values.ok() || values->size() == static_cast<size_t>(view.num_elements()));
    } else {
      absl::StatusOr<std::vector<float>> values = abcd::ToFloat32(view);
      ABCD_FUZZ_CHECK(values.ok() && values->size() == static_cast<size_t>(view.num_elements()));
    }
  }
  return 0;
}
