#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "engine/core/parallel_row_ranges.h"
#include "engine/ops/matmul.h"
#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu {
namespace kernels {

namespace {

// int8: y = (sum of the int32 block sums, in fp32) x row scale x weight scale + bias, in that
// order in every kernel, so that all of them give the same bits.
void GenericInt8Panels(const LinearArgs& a, int64_t first, int64_t count) {
  constexpr int kPanel = PackedMatrix::kPanel;
  const int64_t pairs = a.x_int16_stride / 2;
  for (int64_t p = first; p < first + count; ++p) {
    const auto* panel = static_cast<const int8_t*>(a.panels) + p * a.panel_bytes;
    const int64_t column = p * kPanel;
    const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
    if (valid <= 0) break;
    for (int64_t r = 0; r < a.rows; ++r) {
      const int16_t* x = a.x_int16 + r * a.x_int16_stride;
      float acc[kPanel] = {};
      for (int64_t i0 = 0; i0 < pairs; i0 += kInt8BlockColumns / 2) {
        const int64_t i1 = std::min(pairs, i0 + kInt8BlockColumns / 2);
        int32_t sums[kPanel] = {};
        for (int64_t i = i0; i < i1; ++i) {
          const int8_t* w = panel + i * 2 * kPanel;
          for (int j = 0; j < kPanel; ++j) {
            sums[j] += int32_t{w[2 * j]} * x[2 * i] + int32_t{w[2 * j + 1]} * x[2 * i + 1];
          }
        }
        for (int j = 0; j < kPanel; ++j) acc[j] += static_cast<float>(sums[j]);
      }
      float* y = a.y + r * a.out + column;
      for (int64_t j = 0; j < valid; ++j) {
        float v = acc[j] * a.x_scales[r];
        v *= a.scales[column + j];
        y[j] = v + (a.bias != nullptr ? a.bias[column + j] : 0.0f);
      }
    }
  }
}

template <Format F>
inline float LoadWeight(const void* panel, int64_t index) {
  if constexpr (F == Format::kF32) {
    return static_cast<const float*>(panel)[index];
  } else if constexpr (F == Format::kBF16) {
    return Bf16ToFloat(static_cast<const uint16_t*>(panel)[index]);
  } else {
    static_assert(F == Format::kF16, "int8 has its own kernel");
    return HalfToFloatValue(static_cast<const uint16_t*>(panel)[index]);
  }
}

template <Format F>
void GenericPanels(const LinearArgs& a, int64_t first, int64_t count) {
  constexpr int kPanel = PackedMatrix::kPanel;
  constexpr int kRows = 4;
  for (int64_t p = first; p < first + count; ++p) {
    const void* panel = static_cast<const char*>(a.panels) + p * a.panel_bytes;
    const int64_t column = p * kPanel;
    const int64_t valid = std::min<int64_t>(kPanel, a.out - column);
    if (valid <= 0) break;
    for (int64_t r0 = 0; r0 < a.rows; r0 += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, a.rows - r0);
      float acc[kRows][kPanel] = {};
      for (int64_t k = 0; k < a.in; ++k) {
        float w[kPanel];
        for (int j = 0; j < kPanel; ++j) w[j] = LoadWeight<F>(panel, k * kPanel + j);
        for (int64_t r = 0; r < rows; ++r) {
          const float xr = a.x[(r0 + r) * a.in + k];
          for (int j = 0; j < kPanel; ++j) acc[r][j] += w[j] * xr;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* y = a.y + (r0 + r) * a.out + column;
        for (int64_t j = 0; j < valid; ++j) {
          y[j] = acc[r][j] + (a.bias != nullptr ? a.bias[column + j] : 0.0f);
        }
      }
    }
  }
}

}  // namespace

void LinearPanelsGeneric(const LinearArgs& args, int64_t first, int64_t count) {
  switch (args.format) {
    case Format::kF32:
      return GenericPanels<Format::kF32>(args, first, count);
    case Format::kBF16:
      return GenericPanels<Format::kBF16>(args, first, count);
    case Format::kF16:
      return GenericPanels<Format::kF16>(args, first, count);
    case Format::kInt8:
      return GenericInt8Panels(args, first, count);
  }
}

int64_t QuantizedStride(int64_t in) { return (in + 1) / 2 * 2; }

void QuantizeRows(const float* x, int64_t rows, int64_t in, int16_t* xq, float* scales) {
  const int64_t stride = QuantizedStride(in);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    int16_t* out = xq + r * stride;
    // max|x| over the row; NaN compares false, so it is caught by the finiteness test below.
    float max_abs = 0.0f;
    bool finite = true;
    for (int64_t k = 0; k < in; ++k) {
      const float v = std::fabs(row[k]);
      max_abs = v > max_abs ? v : max_abs;
      finite = finite && v <= 3.4028235e38f;
    }
    if (!finite || max_abs == 0.0f) {
      std::fill(out, out + stride, int16_t{0});
      scales[r] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    scales[r] = max_abs / 32767.0f;
    const float inverse = 32767.0f / max_abs;
    // Round to nearest even by the 1.5 x 2^23 trick: |v| <= 32767 (plus rounding slack), so the
    // sum's low mantissa bits are the rounded integer; a loop the compiler vectorises.
    constexpr float kMagic = 12582912.0f;
    for (int64_t k = 0; k < in; ++k) {
      const float shifted = row[k] * inverse + kMagic;
      int32_t bits;
      std::memcpy(&bits, &shifted, 4);
      const int32_t q = bits - 0x4B400000;
      out[k] = static_cast<int16_t>(std::clamp(q, -32767, 32767));
    }
    if (stride > in) out[in] = 0;
  }
}

bool CpuRunsAvx2Kernels() {
#if defined(__x86_64__)
  // F16C by cpuid: clang 14's __builtin_cpu_supports does not know it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool CpuRunsAvx512Kernels() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool CpuRunsAvx512VnniKernels() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool CpuRunsAvx512Bf16Kernels() {
#if defined(__x86_64__)
  // AVX512_BF16 by cpuid (leaf 7, subleaf 1, eax bit 5): GCC 12 and clang 14's
  // __builtin_cpu_supports do not know it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool bf16 = __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5));
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && bf16;
#else
  return false;
#endif
}

}  // namespace kernels

namespace {

using PanelKernel = void (*)(const kernels::LinearArgs&, int64_t, int64_t);

struct NamedKernel {
  PanelKernel kernel;
  const char* name;
};

// The widest kernel this CPU runs. CPU features never change while the process runs: decided
// once.
const NamedKernel& Chosen() {
  static const NamedKernel chosen = [] {
    if (kernels::CpuRunsAvx512Kernels()) {
      // int8 runs the VNNI kernel where the CPU has it (LinearPanelsAvx512 picks).
      return NamedKernel{&kernels::LinearPanelsAvx512,
                         kernels::CpuRunsAvx512VnniKernels() ? "avx512-vnni" : "avx512"};
    }
    if (kernels::CpuRunsAvx2Kernels()) return NamedKernel{&kernels::LinearPanelsAvx2, "avx2"};
    return NamedKernel{&kernels::LinearPanelsGeneric, "generic"};
  }();
  return chosen;
}

PanelKernel ChosenKernel() { return Chosen().kernel; }

kernels::Format ToKernelFormat(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return kernels::Format::kF32;
    case WeightFormat::kBF16:
      return kernels::Format::kBF16;
    case WeightFormat::kF16:
      return kernels::Format::kF16;
    case WeightFormat::kInt8:
      return kernels::Format::kInt8;
  }
  return kernels::Format::kF32;
}

// A step's activation rows prepared for the kernels (quantised or rounded, each row alone) are
// split across the pool from this many values on (at least 16384 a task), so that a few rows stay
// on the caller.
constexpr int64_t kLinearPrepareSplitValues = 2 * 16384;

// The prepared rows (and their scales), kept on the calling thread from call to call (grown to
// the largest call, never shrunk), so a decode step's products allocate and fault in nothing.
template <typename T>
T* LinearStaging(int64_t count) {
  thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

}  // namespace

const char* LinearKernelName() { return Chosen().name; }

bool Bf16ProductsSupported() {
  static const bool supported = kernels::CpuRunsAvx512Bf16Kernels();
  return supported;
}

bool W8A8Supported() {
  static const bool supported = kernels::CpuRunsAvx512VnniKernels();
  return supported;
}

void Linear(const float* x, int64_t rows, const PackedMatrix& w, const float* bias, float* y,
            ThreadPool* pool, LinearProducts products) {
  if (rows == 0 || w.out() == 0) return;
  kernels::LinearArgs args;
  args.x = x;
  args.rows = rows;
  args.in = w.in();
  args.panels = w.panel(0);
  args.panel_bytes = w.panel_stride();
  // int8: the activations as int16 rows, quantised once here for every thread's panels (W8A8:
  // 8-bit rows instead); bf16 products: rounded to bf16 once. Rows split across the pool.
  const bool w8a8 =
      products == LinearProducts::kInt8 && w.format() == WeightFormat::kInt8 && W8A8Supported();
  const int64_t in = w.in();
  if (w8a8) {
    args.scales = w.scales();
    args.x_u8_stride = kernels::QuadStride(in);
    uint8_t* x_u8 = LinearStaging<uint8_t>(rows * args.x_u8_stride);
    float* x_scales = LinearStaging<float>(rows);
    ParallelRowRanges(pool, rows, in, kLinearPrepareSplitValues, [&](int64_t first, int64_t count) {
      kernels::QuantizeRowsU8(x + first * in, count, in, x_u8 + first * args.x_u8_stride,
                              x_scales + first);
    });
    args.x_u8 = x_u8;
    args.x_scales = x_scales;
  } else if (w.format() == WeightFormat::kInt8) {
    args.scales = w.scales();
    args.x_int16_stride = kernels::QuantizedStride(in);
    int16_t* x_int16 = LinearStaging<int16_t>(rows * args.x_int16_stride);
    float* x_scales = LinearStaging<float>(rows);
    const auto quantize = kernels::CpuRunsAvx512Kernels() ? &kernels::QuantizeRowsAvx512
                          : kernels::CpuRunsAvx2Kernels() ? &kernels::QuantizeRowsAvx2
                                                          : &kernels::QuantizeRows;
    ParallelRowRanges(pool, rows, in, kLinearPrepareSplitValues, [&](int64_t first, int64_t count) {
      quantize(x + first * in, count, in, x_int16 + first * args.x_int16_stride, x_scales + first);
    });
    args.x_int16 = x_int16;
    args.x_scales = x_scales;
  }
  PanelKernel kernel = w8a8 ? &kernels::LinearPanelsAvx512VnniW8A8 : ChosenKernel();
  if (products == LinearProducts::kBf16 && w.format() == WeightFormat::kBF16 &&
      Bf16ProductsSupported()) {
    args.x_bf16_stride = kernels::Bf16Stride(in);
    uint16_t* x_bf16 = LinearStaging<uint16_t>(rows * args.x_bf16_stride);
    ParallelRowRanges(pool, rows, in, kLinearPrepareSplitValues, [&](int64_t first, int64_t count) {
      kernels::RoundRowsToBf16(x + first * in, count, in, x_bf16 + first * args.x_bf16_stride);
    });
    args.x_bf16 = x_bf16;
    kernel = &kernels::LinearPanelsAvx512Bf16;
  }
  args.bias = bias;
  args.out = w.out();
  args.format = ToKernelFormat(w.format());
  args.y = y;
  const int64_t panels = w.panels();
  const int threads = pool != nullptr ? pool->size() : 1;
  if (threads <= 1 || panels < 2) {
    kernel(args, 0, panels);
    return;
  }
  // Tasks of whole 8-panel blocks where there are enough of them, so the kernels keep their
  // widest tiles; otherwise smaller pieces so every thread gets work.
  int64_t per_task = 8;
  while (per_task > 1 && panels / per_task < 2 * threads) per_task /= 2;
  const int64_t tasks = (panels + per_task - 1) / per_task;
  pool->ParallelFor(tasks, [&](int64_t t) {
    const int64_t first = t * per_task;
    kernel(args, first, std::min(per_task, panels - first));
  });
}

}  // namespace abcd::cpu
