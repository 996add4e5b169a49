#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/json_nesting.h"
#include "engine/ops/packed_matrix.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  return absl::InvalidArgumentError(absl::StrCat("unsupported dtype \"", name, "\""));
}

}  // namespace

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  return 0;
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  file->mapping_size_ = static_cast<size_t>(st.st_size);
  if (file->mapping_size_ > 0) {
    void* mapping = ::mmap(nullptr, file->mapping_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
    }
    file->mapping_ = mapping;
  }
  ::close(fd);
  if (absl::Status status = file->Parse(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::span<const std::byte> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = name;
  file->owned_.assign(bytes.begin(), bytes.end());
  file->mapping_size_ = file->owned_.size();
  if (absl::Status status = file->Parse(); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat(name, ": ", status.message()));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

absl::Status SafetensorsFile::Parse() {
  const std::byte* base =
      mapping_ != nullptr ? static_cast<const std::byte*>(mapping_) : owned_.data();
  if (mapping_size_ < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated file: ", mapping_size_, " bytes, need at least 8 for the header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(base[i]);
  if (header_len > kMaxHeaderBytes || header_len > mapping_size_ - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", header_len, " exceeds the file size ", mapping_size_));
  }
  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  if (absl::Status depth = CheckJsonNesting(absl::string_view(header_begin, header_len), "header");
      !depth.ok()) {
    return depth;
  }
  const nlohmann::json header =
      nlohmann::json::parse(header_begin, header_begin + header_len, nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError("header is not a JSON object");
  }
  const std::byte* data = base + 8 + header_len;
  const uint64_t data_size = mapping_size_ - 8 - header_len;

  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();  // (clang 14 cannot capture a structured binding)
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) return absl::InvalidArgumentError("__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat("__metadata__.", key, " is not a string"));
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto fail = [&name](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": ", what));
    };
    if (!entry.is_object()) return fail("entry is not an object");
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) return fail("missing dtype");
    if (shape_it == entry.end() || !shape_it->is_array()) return fail("missing shape");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      return fail("data_offsets must be [begin, end]");
    }
    absl::StatusOr<DType> dtype = ParseDType(dtype_it->get<std::string>());
    if (!dtype.ok()) return fail(dtype.status().message());

    TensorView view;
    view.name = name;
    view.dtype = *dtype;
    uint64_t elements = 1;
    for (const auto& dim : *shape_it) {
      if (!dim.is_number_unsigned()) return fail("shape entries must be non-negative integers");
      const uint64_t d = dim.get<uint64_t>();
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / 8 / d) {
        return fail("shape overflows");
      }
      elements *= d;
      view.shape.push_back(static_cast<int64_t>(d));
    }
    for (const auto& offset : *offsets_it) {
      if (!offset.is_number_unsigned()) return fail("data_offsets must be non-negative integers");
    }
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return fail(absl::StrCat("data_offsets [", begin, ", ", end,
                               "] out of range of the data section (", data_size, " bytes)"));
    }
    const uint64_t expected = elements * DTypeSize(view.dtype);
    if (end - begin != expected) {
      return fail(absl::StrCat("holds ", end - begin, " bytes but dtype ", DTypeName(view.dtype),
                               " and shape need ", expected));
    }
    view.bytes = std::span<const std::byte>(data + begin, end - begin);
    auto [it, inserted] = tensors_.emplace(name, std::move(view));
    ranges.push_back({begin, end, &it->first});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return absl::InvalidArgumentError(absl::StrCat("tensors \"", *ranges[i - 1].name, "\" and \"",
                                                     *ranges[i].name, "\" overlap"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const TensorView*> SafetensorsFile::Get(absl::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor \"", name, "\""));
  }
  return &it->second;
}

bool SafetensorsFile::Contains(absl::string_view name) const { return tensors_.contains(name); }

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

absl::StatusOr<std::vector<float>> ToFloat32(const TensorView& tensor) {
  const size_t n = static_cast<size_t>(tensor.num_elements());
  std::vector<float> out(n);
  const std::byte* src = tensor.bytes.data();
  switch (tensor.dtype) {
    case DType::kF32:
      // A zero-element tensor has no buffer on either side: memcpy(nullptr, ..., 0) is UB.
      if (n > 0) std::memcpy(out.data(), src, n * 4);
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = Bf16ToFloat(h);
      }
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = HalfToFloatValue(h);
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", tensor.name, "\" has dtype ",
                                                     DTypeName(tensor.dtype),
                                                     ", expected a floating type"));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ToInt32(const TensorView& tensor) {
  const size_t n = static_cast<size_t>(tensor.num_elements());
  std::vector<int32_t> out(n);
  const std::byte* src = tensor.bytes.data();
  if (tensor.dtype == DType::kI32) {
    if (n > 0) std::memcpy(out.data(), src, n * 4);
    return out;
  }
  if (tensor.dtype == DType::kI64) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v;
      std::memcpy(&v, src + 8 * i, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return absl::OutOfRangeError(
            absl::StrCat("tensor \"", tensor.name, "\" element ", i, " does not fit int32"));
      }
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("tensor \"", tensor.name, "\" has dtype ",
                                                 DTypeName(tensor.dtype), ", expected I32 or I64"));
}

}  // namespace abcd
