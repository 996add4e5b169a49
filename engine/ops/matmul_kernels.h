// The inner kernels behind cpu::Linear (engine/ops/matmul.h), one per instruction set: plain
// data in, no engine types, so that the AVX-512 and AVX2 translation units (compiled with
// -mavx512f, -mavx2 -mfma -mf16c) share no inline code with the rest of the program. Called only
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
  const float* bias = nullptr;    // [out] or null
  int64_t out = 0;
  Format format = Format::kF32;
  float* y = nullptr;  // [rows, out]
};

// y[:, 16*first .. 16*(first+count)) for every row (columns past `out` are not written).
void LinearPanelsGeneric(const LinearArgs& args, int64_t first, int64_t count);
void LinearPanelsAvx512(const LinearArgs& args, int64_t first, int64_t count);  // AVX-512F
void LinearPanelsAvx2(const LinearArgs& args, int64_t first, int64_t count);    // AVX2+FMA+F16C

}  // namespace abcd::cpu::kernels
