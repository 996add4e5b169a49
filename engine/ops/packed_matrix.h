// A weight matrix W [out, in] (torch nn.Linear layout) stored once, in the layout and number
// format the CPU matrix kernels read (engine/ops/matmul.h), so a decode step reads each weight
// exactly once and never repacks it.
//
// Layout: panels of kPanel = 16 consecutive output rows; panel p holds, for every input column
// k, the 16 weights W[16p .. 16p+15][k] next to each other (one 64-byte vector in fp32). A
// kernel therefore streams a panel front to back and multiplies each 16-wide weight vector by
// one broadcast activation per row of the batch: no horizontal sums, any batch size. The last
// panel is padded with zero rows.
//
// Formats: fp32; bf16 and fp16 (2 bytes, widened to fp32 in registers; exact for checkpoints
// stored in that type), with fp32 activations and sums; int8 (symmetric per output row, scale =
// max|W[o]| / 127), whose products run in integers: each activation row is quantised to int16
// with its own scale (max|x| / 32767, so its rounding is ~1/256 of the weights'), pairs of
// int8 x int16 products are summed into int32 (AVX2 vpmaddwd), and the sums are scaled back to
// fp32 (engine/ops/matmul_kernels.h).
//
// int8 panels hold the input columns in pairs: for each pair (2i, 2i+1), the 32 bytes
// W[16p + j][2i], W[16p + j][2i + 1] for j = 0 .. 15. `in` is rounded up to even with a zero
// column.
//
// Thread-safety: immutable after construction; safe to share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace abcd {

enum class WeightFormat { kF32, kBF16, kF16, kInt8 };

absl::string_view WeightFormatName(WeightFormat format);
// "f32" / "fp32", "bf16", "f16" / "fp16", "int8"; InvalidArgument naming the value otherwise.
absl::StatusOr<WeightFormat> ParseWeightFormat(absl::string_view name);
// Bytes one weight takes in `format` (int8: 1, scales not counted).
size_t WeightFormatBytes(WeightFormat format);

// fp32 <-> bf16 / fp16 bit patterns (round to nearest even; NaN stays NaN).
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
float HalfToFloatValue(uint16_t bits);
// The same conversions over n values (the same bits as one at a time, without a call per value).
void Bf16sToFloats(const uint16_t* in, size_t n, float* out);
void HalvesToFloats(const uint16_t* in, size_t n, float* out);
void FloatsToBf16s(const float* in, size_t n, uint16_t* out);
void FloatsToHalves(const float* in, size_t n, uint16_t* out);

class PackedMatrix {
 public:
  static constexpr int kPanel = 16;

  PackedMatrix() = default;
  // Packs w [out * in] (row-major) into `format`.
  static PackedMatrix Pack(std::span<const float> w, int64_t out, int64_t in, WeightFormat format);

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t panels() const { return (out_ + kPanel - 1) / kPanel; }
  WeightFormat format() const { return format_; }
  bool empty() const { return out_ == 0; }
  // Bytes the kernels read for one product: every panel (padding included) plus int8 scales.
  int64_t bytes() const;

  // Bytes from one panel to the next.
  int64_t panel_stride() const { return static_cast<int64_t>(PanelBytes()); }
  // Panel p's storage: in() x kPanel values of format().
  const void* panel(int64_t p) const { return data_.get() + static_cast<size_t>(p) * PanelBytes(); }
  // int8 only: the scale of each output row (panels() * kPanel entries, padding rows 1).
  const float* scales() const { return scales_.data(); }

  // Row o of W as fp32 (dequantised for int8), `in()` floats.
  void Row(int64_t o, float* dst) const;
  // W [out, in] as fp32, for backends that keep their own copy.
  std::vector<float> ToFloat() const;

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  // Columns a panel stores: int8 rounds `in` up to whole pairs.
  int64_t StoredColumns() const { return format_ == WeightFormat::kInt8 ? (in_ + 1) / 2 * 2 : in_; }
  size_t PanelBytes() const {
    return static_cast<size_t>(StoredColumns()) * kPanel * WeightFormatBytes(format_);
  }
  // Where W[16p + j][k] sits in its panel, in values of format().
  size_t IndexInPanel(int64_t k, int64_t j) const {
    if (format_ == WeightFormat::kInt8)
      return static_cast<size_t>((k / 2) * 2 * kPanel + j * 2 + k % 2);
    return static_cast<size_t>(k * kPanel + j);
  }

  int64_t out_ = 0;
  int64_t in_ = 0;
  WeightFormat format_ = WeightFormat::kF32;
  std::unique_ptr<std::byte[], FreeDeleter> data_;  // 64-byte aligned
  std::vector<float> scales_;
};

}  // namespace abcd
