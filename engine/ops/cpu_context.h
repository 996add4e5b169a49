// What a CPU forward pass runs on: the backend's thread pool, how bf16 weights are multiplied,
// and scratch buffers that are reused from step to step (grown to the largest step seen, never
// shrunk), so a decode step allocates nothing and touches no fresh pages.
//
// Thread-safety: one owner thread (the engine thread of a CpuBackend). The buffers may be
// written by the pool's tasks of one op, each task its own rows.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/core/thread_pool.h"

namespace abcd {

namespace cpu {
// How bf16 and int8 weights are multiplied (cpu::Linear, engine/ops/matmul.h): kFloat32, the
// default (exact fp32 products; int8 weights by int16 activations), kBf16 (bf16 weights by
// bf16 activations) or kInt8 (int8 weights by 8-bit activations, W8A8).
enum class LinearProducts { kFloat32, kBf16, kInt8 };
}  // namespace cpu

enum class Scratch {
  kResidual,    // x: the residual stream [rows, d]
  kNormed,      // layer-normed input of a sublayer
  kDelta,       // a sublayer's output
  kProjection,  // fused q|k|v|extra projections
  kPrepared,    // kernel-input rows built from the projections (AttentionState::PrepareRows)
  kMixerRows,   // a state's own intermediate rows (short convolution outputs, short_conv.h)
  kAttended,    // attention output before the out projection
  kHidden,      // feed-forward hidden [rows, d_ff] ([rows, 2 d_ff] for SwiGLU's gate|up)
  kGated,       // SwiGLU's silu(gate) * up [rows, d_ff]
  kSelected,    // rows whose logits are wanted
  kCount,
};

class CpuContext {
 public:
  explicit CpuContext(int threads, cpu::LinearProducts products = cpu::LinearProducts::kFloat32)
      : pool_(threads), linear_products_(products) {}

  ThreadPool& pool() { return pool_; }
  int threads() const { return pool_.size(); }
  // How this pass multiplies bf16 weights (cpu::Linear).
  cpu::LinearProducts linear_products() const { return linear_products_; }

  // At least `floats` floats; contents are whatever the last user left.
  float* Buffer(Scratch which, int64_t floats) {
    std::vector<float>& b = buffers_[static_cast<size_t>(which)];
    if (static_cast<int64_t>(b.size()) < floats) b.resize(static_cast<size_t>(floats));
    return b.data();
  }

 private:
  ThreadPool pool_;
  cpu::LinearProducts linear_products_;
  std::array<std::vector<float>, static_cast<size_t>(Scratch::kCount)> buffers_;
};

}  // namespace abcd
