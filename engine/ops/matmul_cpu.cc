#include <algorithm>
#include <cstring>

#include "engine/ops/matmul.h"
#include "engine/ops/matmul_kernels.h"

namespace abcd::cpu {
namespace kernels {

namespace {

template <Format F>
inline float LoadWeight(const void* panel, int64_t index) {
  if constexpr (F == Format::kF32) {
    return static_cast<const float*>(panel)[index];
  } else if constexpr (F == Format::kBF16) {
    return Bf16ToFloat(static_cast<const uint16_t*>(panel)[index]);
  } else if constexpr (F == Format::kF16) {
    return HalfToFloatValue(static_cast<const uint16_t*>(panel)[index]);
  } else {
    return static_cast<float>(static_cast<const int8_t*>(panel)[index]);
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
          float v = acc[r][j];
          if constexpr (F == Format::kInt8) v *= a.scales[column + j];
          y[j] = v + (a.bias != nullptr ? a.bias[column + j] : 0.0f);
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
      return GenericPanels<Format::kInt8>(args, first, count);
  }
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
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f"))
      return NamedKernel{&kernels::LinearPanelsAvx512, "avx512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
      return NamedKernel{&kernels::LinearPanelsAvx2, "avx2"};
    }
#endif
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

}  // namespace

const char* LinearKernelName() { return Chosen().name; }

void Linear(const float* x, int64_t rows, const PackedMatrix& w, const float* bias, float* y,
            ThreadPool* pool) {
  if (rows == 0 || w.out() == 0) return;
  kernels::LinearArgs args;
  args.x = x;
  args.rows = rows;
  args.in = w.in();
  args.panels = w.panel(0);
  args.panel_bytes = w.panel_stride();
  args.scales = w.format() == WeightFormat::kInt8 ? w.scales() : nullptr;
  args.bias = bias;
  args.out = w.out();
  args.format = ToKernelFormat(w.format());
  args.y = y;
  const PanelKernel kernel = ChosenKernel();
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
