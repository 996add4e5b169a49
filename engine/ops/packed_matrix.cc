#include "engine/ops/packed_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace abcd {

absl::string_view WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kInt8:
      return "int8";
  }
  return "?";
}

absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name) {
  if (name == "f32" || name == "fp32") return WeightFormat::kF32;
  if (name == "bf16") return WeightFormat::kBF16;
  if (name == "f16" || name == "fp16") return WeightFormat::kF16;
  if (name == "int8") return WeightFormat::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("weight format \"", name.substr(0, 64), "\": expected f32, bf16, f16 or int8"));
}

size_t WeightFormatBytes(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      return 2;
    case WeightFormat::kInt8:
      return 1;
  }
  return 4;
}

namespace {

inline uint16_t FloatToBf16Inline(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloatInline(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// IEEE binary16 by bit manipulation, so that every compiler builds it (clang 14 has no x86
// _Float16). Round to nearest even; overflow to infinity; NaN stays a quiet NaN with its sign and
// the top of its payload. matmul_test checks both directions against the compiler's _Float16
// where it has one.
inline uint16_t FloatToHalfInline(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {
    // Below 2^-14: a subnormal half (or zero), in units of 2^-24. Scaling by 2^24 is exact, and
    // nearbyint rounds to nearest even; 1024 units is the smallest normal, which is right.
    float magnitude_value;
    std::memcpy(&magnitude_value, &magnitude, 4);
    return static_cast<uint16_t>(sign |
                                 static_cast<uint16_t>(std::nearbyint(magnitude_value * 0x1p24f)));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest
  // even; a carry out of the mantissa correctly moves to the next exponent.
  const uint32_t rebiased = magnitude - 0x38000000u;
  return static_cast<uint16_t>(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
}

inline float HalfToFloatInline(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign != 0 ? -magnitude : magnitude;
  }
  const uint32_t wide = exponent == 0x1fu ? sign | 0x7f800000u | (mantissa << 13)
                                          : sign | ((exponent + 112u) << 23) | (mantissa << 13);
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

}  // namespace

uint16_t FloatToBf16(float value) { return FloatToBf16Inline(value); }
float Bf16ToFloat(uint16_t bits) { return Bf16ToFloatInline(bits); }
uint16_t FloatToHalf(float value) { return FloatToHalfInline(value); }
float HalfToFloatValue(uint16_t bits) { return HalfToFloatInline(bits); }

void Bf16sToFloats(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloatInline(in[i]);
}
void HalvesToFloats(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloatInline(in[i]);
}
void FloatsToBf16s(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16Inline(in[i]);
}
void FloatsToHalves(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalfInline(in[i]);
}

void PackedMatrix::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

int64_t PackedMatrix::bytes() const {
  int64_t total = panels() * static_cast<int64_t>(PanelBytes());
  if (format_ == WeightFormat::kInt8) total += panels() * kPanel * 4;
  return total;
}

PackedMatrix PackedMatrix::Pack(std::span<const float> w, int64_t out, int64_t in,
                                WeightFormat format) {
  PackedMatrix m;
  m.out_ = out;
  m.in_ = in;
  m.format_ = format;
  const size_t total = static_cast<size_t>(m.panels()) * m.PanelBytes();
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = std::max<size_t>(64, (total + 63) / 64 * 64);
  m.data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, rounded)));
  if (m.data_ == nullptr) throw std::bad_alloc();
  std::memset(m.data_.get(), 0, rounded);
  if (format == WeightFormat::kInt8) m.scales_.assign(static_cast<size_t>(m.panels()) * kPanel, 1);
  for (int64_t o = 0; o < out; ++o) {
    const float* row = w.data() + o * in;
    const int64_t p = o / kPanel, j = o % kPanel;
    std::byte* base = m.data_.get() + static_cast<size_t>(p) * m.PanelBytes();
    float scale = 1.0f;
    if (format == WeightFormat::kInt8) {
      float max_abs = 0.0f;
      for (int64_t k = 0; k < in; ++k) max_abs = std::max(max_abs, std::fabs(row[k]));
      scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
      m.scales_[static_cast<size_t>(o)] = scale;
    }
    for (int64_t k = 0; k < in; ++k) {
      const size_t index = m.IndexInPanel(k, j);
      switch (format) {
        case WeightFormat::kF32:
          reinterpret_cast<float*>(base)[index] = row[k];
          break;
        case WeightFormat::kBF16:
          reinterpret_cast<uint16_t*>(base)[index] = FloatToBf16(row[k]);
          break;
        case WeightFormat::kF16:
          reinterpret_cast<uint16_t*>(base)[index] = FloatToHalf(row[k]);
          break;
        case WeightFormat::kInt8: {
          const float q = std::nearbyint(row[k] / scale);
          reinterpret_cast<int8_t*>(base)[index] =
              static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
          break;
        }
      }
    }
  }
  return m;
}

void PackedMatrix::Row(int64_t o, float* dst) const {
  const int64_t p = o / kPanel, j = o % kPanel;
  const std::byte* base = static_cast<const std::byte*>(panel(p));
  for (int64_t k = 0; k < in_; ++k) {
    const size_t index = IndexInPanel(k, j);
    switch (format_) {
      case WeightFormat::kF32:
        dst[k] = reinterpret_cast<const float*>(base)[index];
        break;
      case WeightFormat::kBF16:
        dst[k] = Bf16ToFloat(reinterpret_cast<const uint16_t*>(base)[index]);
        break;
      case WeightFormat::kF16:
        dst[k] = HalfToFloatValue(reinterpret_cast<const uint16_t*>(base)[index]);
        break;
      case WeightFormat::kInt8:
        dst[k] = static_cast<float>(reinterpret_cast<const int8_t*>(base)[index]) *
                 scales_[static_cast<size_t>(o)];
        break;
    }
  }
}

std::vector<float> PackedMatrix::ToFloat() const {
  std::vector<float> w(static_cast<size_t>(out_ * in_));
  for (int64_t o = 0; o < out_; ++o) Row(o, w.data() + o * in_);
  return w;
}

}  // namespace abcd
