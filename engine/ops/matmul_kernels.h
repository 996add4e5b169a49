// The inner kernels behind cpu::Linear (engine/ops/matmul.h), one per instruction set: plain
// data in, no engine types, so that the AVX-512, AVX-512 VNNI and AVX2 translation units
// (compiled with -mavx512f; -mavx512f -mavx512bw -mavx512vnni; -mavx2 -mfma -mf16c) share no
// inline code with the rest of the program. Called only
// through matmul_cpu.cc.
#pragma once

#include <cstdint>

namespace abcd::cpu::kernels {

enum class Format { kF32, kBF16, kF16, kInt8 };

struct LinearArgs {
  const float* x = nullptr;  // [rows, in]
  int64_t rows = 0;
  int64_t in = 0;
  const void* panels = nullptr;  // PackedMatrix storage: panel p at p * panel_bytes
  int64_t panel_bytes = 0;
  const float* scales = nullptr;  // int8: per output row; else null
  // int8 only: x quantised by QuantizeRows, [rows, x_int16_stride], and each row's scale.
  const int16_t* x_int16 = nullptr;
  int64_t x_int16_stride = 0;  // QuantizedStride(in)
  const float* x_scales = nullptr;
  // bf16 products (bf16 weights, LinearPanelsAvx512Bf16 only): x rounded by RoundRowsToBf16,
  // [rows, x_bf16_stride].
  const uint16_t* x_bf16 = nullptr;
  int64_t x_bf16_stride = 0;  // Bf16Stride(in)
  // W8A8 (int8 weights, LinearPanelsAvx512VnniW8A8 only): x quantised by QuantizeRowsU8,
  // [rows, x_u8_stride], and each row's scale in x_scales.
  const uint8_t* x_u8 = nullptr;
  int64_t x_u8_stride = 0;      // QuadStride(in)
  const float* bias = nullptr;  // [out] or null
  int64_t out = 0;
  Format format = Format::kF32;
  float* y = nullptr;  // [rows, out]
};

// int8 products sum int32 over blocks of this many input columns, then add the block sums in
// fp32: |sum| <= 256 x 127 x 32767 < 2^31, so no block overflows whatever the values.
inline constexpr int64_t kInt8BlockColumns = 256;

// Columns of a quantised activation row: `in` rounded up to a whole pair (the pad is 0).
int64_t QuantizedStride(int64_t in);

// int8 products: x [rows, in] as int16, row r scaled by scales[r] = max|x_r| / 32767 (values
// rounded to nearest even, so |x_int16 * scale - x| <= scale / 2); xq is [rows,
// QuantizedStride(in)]. A row of zeros gets scale 0; a row holding a NaN or an infinity gets
// scale NaN and zeros, so its outputs are NaN as fp32 products would be.
void QuantizeRows(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales);
// The same values, 16 columns an instruction (AVX-512F, matmul_cpu_avx512.cc; only where
// CpuRunsAvx512Kernels()).
void QuantizeRowsAvx512(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales);
// The same with AVX2 (matmul_cpu_avx2.cc; only where CpuRunsAvx2Kernels()).
void QuantizeRowsAvx2(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales);

// Columns of an 8-bit activation row (W8A8): `in` rounded up to a whole quad (the pad is 128,
// a zero).
inline int64_t QuadStride(int64_t in) { return (in + 3) / 4 * 4; }

// W8A8: x [rows, in] quantised to 8 bits per row, scales[r] = max|x_r| / 127, stored as
// q + 128 (q = x / scale rounded to nearest even, in [-127, 127]) into xq [rows, QuadStride(in)].
// A row of zeros gets scale 0 and a row holding a NaN or an infinity scale NaN, as QuantizeRows.
// AVX-512F (matmul_cpu_avx512.cc): only where CpuRunsAvx512Kernels().
void QuantizeRowsU8(const float* x, int64_t rows, int64_t in, uint8_t* xq, float* scales);

// Columns of a bf16 activation row: `in` rounded up to a whole pair (the pad is 0).
inline int64_t Bf16Stride(int64_t in) { return (in + 1) / 2 * 2; }

// bf16 products: x [rows, in] rounded to bf16 (nearest even, as vcvtneps2bf16 does) into out
// [rows, Bf16Stride(in)]. AVX512_BF16 only (matmul_cpu_avx512_bf16.cc).
void RoundRowsToBf16(const float* x, int64_t rows, int64_t in, uint16_t* out);

// What this CPU runs (CPU features by cpuid; the same answer every call).
bool CpuRunsAvx2Kernels();        // AVX2, FMA and F16C
bool CpuRunsAvx512Kernels();      // AVX-512F
bool CpuRunsAvx512VnniKernels();  // AVX-512F, AVX512BW and AVX512-VNNI
bool CpuRunsAvx512Bf16Kernels();  // AVX-512F, AVX512BW and AVX512_BF16

// y[:, 16*first .. 16*(first+count)) for every row (columns past `out` are not written).
void LinearPanelsGeneric(const LinearArgs& args, int64_t first, int64_t count);
// AVX-512F; int8 runs LinearPanelsAvx512VnniInt8 where the CPU has VNNI, else the AVX2 kernel
// (every AVX-512 CPU has AVX2, FMA and F16C).
void LinearPanelsAvx512(const LinearArgs& args, int64_t first, int64_t count);
// int8 only (matmul_cpu_avx512_vnni.cc); the same bits as the other int8 kernels.
void LinearPanelsAvx512VnniInt8(const LinearArgs& args, int64_t first, int64_t count);
// int8 weights times the 8-bit activations in args.x_u8 (W8A8; matmul_cpu_avx512_vnni.cc).
void LinearPanelsAvx512VnniW8A8(const LinearArgs& args, int64_t first, int64_t count);
void LinearPanelsAvx2(const LinearArgs& args, int64_t first, int64_t count);  // AVX2+FMA+F16C
// bf16 weights times the bf16 activations in args.x_bf16 (matmul_cpu_avx512_bf16.cc).
void LinearPanelsAvx512Bf16(const LinearArgs& args, int64_t first, int64_t count);

}  // namespace abcd::cpu::kernels
