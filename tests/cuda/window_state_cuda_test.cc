// The sliding-window kernel (WindowStep) against the CPU WindowState, UpdateHead then ReadHead
// row by row: GQA groups of 1, 4 and 7 query heads, vectorised and scalar head widths, windows
// that split across blocks and ones that do not, decode steps past the ring's wrap at batch 1
// and 7, prefill scans of several runs (one that wraps the ring in the middle of the run),
// padding rows (null states) and a speculative checkpoint; outputs within kWindowTolerance,
// ring blocks and checkpoints exact. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/attention/attention_state_cuda.h"
#include "engine/attention/softmax_state.h"
#include "tests/cuda/cuda_test_util.h"

namespace abcd::cuda {
namespace {

// Scores of inputs in [-2, 2] reach |s| ~ 50 at dh 128, where the softmax is peaked and the
// two backends' summation orders show: the CPU emulation of the kernel measured up to 7.3e-6.
constexpr float kWindowTolerance = 3e-5f;

struct WindowCase {
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int window = 0;
};

std::string WindowCaseName(const WindowCase& c) {
  return "window " + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + " dh " +
         std::to_string(c.head_dim) + " w " + std::to_string(c.window);
}

class WindowCudaTest : public CudaTest {
 protected:
  // `sequences` empty rings on both sides.
  void Start(const WindowCase& c, int sequences) {
    case_ = c;
    cpu_ = std::make_unique<WindowState>(c.q_heads, c.kv_heads, c.head_dim, c.window,
                                         std::vector<float>{});
    floats_ = cpu_->FixedFloats();
    host_.assign(static_cast<size_t>(sequences * floats_), 0.0f);
    for (int s = 0; s < sequences; ++s) cpu_->Init(host_.data() + s * floats_);
    device_ = Upload(host_);
    positions_.assign(static_cast<size_t>(sequences), 0);
  }

  // One pass: sequence s takes counts[s] rows (0: none); `scan` uses the scan form (rows.first),
  // else every count must be 1 (decode form). Sequence `padding` (if >= 0) is a padding row /
  // run: null state, zero output. `checkpoint_row` (if >= 0): that row saves a checkpoint.
  void Pass(const std::vector<int>& counts, bool scan, int padding, int checkpoint_row,
            uint32_t seed, const std::string& what) {
    const WindowCase& c = case_;
    const int64_t q_width = int64_t{c.q_heads} * c.head_dim;
    const int64_t kv_width = int64_t{c.kv_heads} * c.head_dim;
    const int64_t width = q_width + 2 * kv_width;
    std::vector<int32_t> first, count;
    std::vector<int64_t> positions;
    std::vector<float*> states, checkpoints;
    int64_t batch = 0;
    for (size_t s = 0; s < counts.size(); ++s) {
      if (counts[s] == 0) continue;
      first.push_back(static_cast<int32_t>(batch));
      count.push_back(counts[s]);
      for (int r = 0; r < counts[s]; ++r) {
        positions.push_back(static_cast<int>(s) == padding ? 0 : positions_[s] + r);
        if (!scan) {
          states.push_back(static_cast<int>(s) == padding ? nullptr : device_.data() + s * floats_);
        }
      }
      if (scan) {
        states.push_back(static_cast<int>(s) == padding ? nullptr : device_.data() + s * floats_);
      }
      batch += counts[s];
    }
    const std::vector<float> rows = RandomFloats(batch * width, seed, -2.0f, 2.0f);
    std::vector<float> expected(static_cast<size_t>(batch * q_width), 0.0f);
    std::vector<float> expected_checkpoint;
    int64_t row = 0;
    for (size_t s = 0; s < counts.size(); ++s) {
      for (int r = 0; r < counts[s]; ++r, ++row) {
        if (static_cast<int>(s) == padding) continue;
        const float* x = rows.data() + row * width;
        StateRef ref{host_.data() + s * floats_, nullptr, positions_[s]++};
        cpu_->Update(KeyValueRow{x + q_width, x + q_width + kv_width, nullptr}, ref);
        cpu_->Read(x, ref, expected.data() + row * q_width);
        if (row == checkpoint_row) {
          expected_checkpoint.assign(ref.fixed, ref.fixed + floats_);
        }
      }
    }
    DeviceArray<float> saved = Upload(std::vector<float>(static_cast<size_t>(floats_), NAN));
    if (checkpoint_row >= 0) {
      checkpoints.assign(static_cast<size_t>(batch), nullptr);
      checkpoints[static_cast<size_t>(checkpoint_row)] = saved.data();
    }
    DeviceArray<float> device_rows = Upload(rows);
    DeviceArray<float> out = Upload(std::vector<float>(static_cast<size_t>(batch * q_width), NAN));
    DeviceArray<int64_t> device_positions = Upload(positions);
    DeviceArray<float*> device_states = Upload(states);
    DeviceArray<float*> device_checkpoints;
    if (!checkpoints.empty()) device_checkpoints = Upload(checkpoints);
    DeviceArray<int32_t> device_first = Upload(first), device_count = Upload(count);
    StepRows step{batch, device_rows.data(),   width,      device_rows.data() + q_width,
                  width, device_states.data(), out.data(), q_width};
    if (scan) {
      step.sequences = static_cast<int64_t>(first.size());
      step.first = device_first.data();
      step.count = device_count.data();
      step.longest_run = *std::max_element(count.begin(), count.end());
    }
    if (checkpoint_row >= 0) step.checkpoints = device_checkpoints.data();
    const WindowShape shape{c.q_heads, c.kv_heads, c.head_dim, c.window};
    ASSERT_TRUE(WindowStep(context(), shape, step, device_positions.data()).ok()) << what;
    ExpectClose(Download(out), expected, kWindowTolerance, what + " output");
    ExpectClose(Download(device_), host_, 0.0f, what + " rings");
    if (checkpoint_row >= 0) {
      ExpectClose(Download(saved), expected_checkpoint, 0.0f, what + " checkpoint");
    }
  }

  WindowCase case_;
  std::unique_ptr<WindowState> cpu_;
  int64_t floats_ = 0;
  std::vector<float> host_;
  DeviceArray<float> device_;
  std::vector<int64_t> positions_;
};

const WindowCase kWindowCases[] = {
    {8, 2, 64, 16},    // GQA 4, vectorised, small ring (one block)
    {7, 1, 18, 9},     // GQA 7, scalar head width
    {4, 4, 32, 200},   // no GQA, a ring split across blocks at small batch
    {8, 2, 128, 130},  // the 1.3B head width, split
};

// Decode steps at batch 1 and 7 (one a padding row), the positions crossing the ring's wrap.
TEST_F(WindowCudaTest, DecodeStepsMatchCpuAcrossTheWrap) {
  for (const WindowCase& c : kWindowCases) {
    for (const int batch : {1, 7}) {
      Start(c, batch);
      const std::string what = WindowCaseName(c) + " batch " + std::to_string(batch);
      // Fill past the window first (a scan, checked too), then decode across the wrap.
      std::vector<int> fill(static_cast<size_t>(batch));
      for (int s = 0; s < batch; ++s) fill[s] = 1 + (c.window - 2 + 3 * s) % (c.window + 5);
      Pass(fill, /*scan=*/true, -1, -1, 10, what + " fill");
      if (HasFatalFailure()) return;
      for (int step = 0; step < 6; ++step) {
        Pass(std::vector<int>(static_cast<size_t>(batch), 1), /*scan=*/false, batch > 1 ? 3 : -1,
             -1, 20 + step, what + " step " + std::to_string(step));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Prefill scans: one long run that wraps the ring, several short ones beside a padding run,
// and a run with a checkpoint row; then decode rows in the scan form beside a prompt chunk.
TEST_F(WindowCudaTest, PrefillScanMatchesCpuRowByRow) {
  for (const WindowCase& c : kWindowCases) {
    const std::string what = WindowCaseName(c);
    Start(c, 4);
    Pass({c.window + 7, 0, 0, 0}, /*scan=*/true, -1, -1, 30, what + " long run");
    if (HasFatalFailure()) return;
    Pass({5, 3, 4, 2}, /*scan=*/true, 2, -1, 31, what + " short runs and padding");
    if (HasFatalFailure()) return;
    Pass({2, 6, 1, 0}, /*scan=*/true, -1, /*checkpoint_row=*/4, 32, what + " checkpoint");
    if (HasFatalFailure()) return;
    Pass({1, 1, 9, 1}, /*scan=*/true, -1, -1, 33, what + " mixed");
    if (HasFatalFailure()) return;
  }
}

TEST_F(WindowCudaTest, BadShapesAreRefused) {
  const StepRows rows{1};
  DeviceArray<int64_t> positions = Upload(std::vector<int64_t>{0});
  EXPECT_FALSE(WindowStep(context(), WindowShape{8, 3, 64, 16}, rows, positions.data()).ok());
  EXPECT_FALSE(WindowStep(context(), WindowShape{8, 2, 64, 0}, rows, positions.data()).ok());
  EXPECT_FALSE(WindowStep(context(), WindowShape{8, 2, 64, 16}, rows, nullptr).ok());
}

}  // namespace
}  // namespace abcd::cuda
