// The softmax scan's fast paths (engine/attention/softmax_read.h, SoftmaxState::Scan) against
// the plain row-by-row reads they replace: a read split into pieces and merged
// (flash-decoding), a causal run read in blocks (prefill), and a whole step of the state with
// long decode rows split across two threads next to a prompt run, with GQA.
#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/packed_matrix.h"
#include "gtest/gtest.h"

namespace abcd {
namespace {

struct Rows {
  std::vector<float> keys, values;
  std::vector<uint16_t> keys16, values16;
  std::vector<F16> keys_f16, values_f16;
};

Rows RandomRows(int64_t count, int64_t stride, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Rows r;
  r.keys.resize(static_cast<size_t>(count * stride));
  r.values.resize(r.keys.size());
  for (float& x : r.keys) x = normal(rng) * 0.4f;
  for (float& x : r.values) x = normal(rng);
  for (float x : r.keys) r.keys16.push_back(FloatToBf16(x));
  for (float x : r.values) r.values16.push_back(FloatToBf16(x));
  for (float x : r.keys) r.keys_f16.push_back({FloatToHalf(x)});
  for (float x : r.values) r.values_f16.push_back({FloatToHalf(x)});
  return r;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-5f * (1 + std::fabs(want[i]))) << what << " at " << i;
  }
}

TEST(SoftmaxScanTest, SplitReadsMergedEqualTheWholeRead) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    int group, head_dim;
    int64_t count;
    int pieces;
  };
  for (const Case& c : {Case{1, 64, 1000, 2}, Case{4, 64, 2049, 3}, Case{2, 24, 777, 7},
                        Case{1, 128, 130, 2}, Case{3, 20, 65, 5}}) {
    const int64_t stride = 2 * int64_t{c.head_dim};  // head 1 of 2
    const Rows rows = RandomRows(c.count, stride, rng);
    std::vector<float> q(static_cast<size_t>(c.group * c.head_dim));
    for (float& x : q) x = normal(rng);
    for (bool bf16 : {false, true}) {
      const int64_t width = int64_t{c.group} * c.head_dim;
      std::vector<float> whole(static_cast<size_t>(width));
      std::vector<SoftmaxPartial> partials(static_cast<size_t>(c.pieces * c.group));
      std::vector<float> outs(static_cast<size_t>(c.pieces * width));
      if (bf16) {
        SoftmaxReadGroup(q.data(), c.group, rows.keys16.data() + c.head_dim,
                         rows.values16.data() + c.head_dim, c.count, stride, c.head_dim,
                         whole.data());
      } else {
        SoftmaxReadGroup(q.data(), c.group, rows.keys.data() + c.head_dim,
                         rows.values.data() + c.head_dim, c.count, stride, c.head_dim,
                         whole.data());
      }
      for (int p = 0; p < c.pieces; ++p) {
        const int64_t begin = c.count * p / c.pieces, end = c.count * (p + 1) / c.pieces;
        SoftmaxPartial* partial = partials.data() + p * c.group;
        float* out = outs.data() + p * width;
        if (bf16) {
          SoftmaxReadPartial(q.data(), 1, c.group, rows.keys16.data() + c.head_dim,
                             rows.values16.data() + c.head_dim, begin, end, stride, c.head_dim,
                             partial, out);
        } else {
          SoftmaxReadPartial(q.data(), 1, c.group, rows.keys.data() + c.head_dim,
                             rows.values.data() + c.head_dim, begin, end, stride, c.head_dim,
                             partial, out);
        }
      }
      std::vector<float> merged(whole.size());
      for (int g = 0; g < c.group; ++g) {
        SoftmaxMerge(partials.data() + g, c.group, outs.data() + g * c.head_dim, width, c.pieces,
                     c.head_dim, merged.data() + g * c.head_dim);
      }
      ExpectNear(merged, whole, bf16 ? "bf16 split" : "f32 split");
    }
  }
}

TEST(SoftmaxScanTest, CausalRunEqualsEachRowsRead) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    int group, head_dim;
    int64_t first_position, rows;
  };
  for (const Case& c : {Case{1, 64, 0, 1}, Case{1, 64, 0, 300}, Case{4, 32, 100, 130},
                        Case{2, 24, 257, 40}, Case{1, 128, 63, 70}, Case{3, 20, 0, 513}}) {
    const int64_t stride = 3 * int64_t{c.head_dim};  // head 2 of 3
    const int64_t total = c.first_position + c.rows;
    const Rows rows = RandomRows(total, stride, rng);
    const int64_t width = int64_t{c.group} * c.head_dim;
    const int64_t q_stride = width + 5, out_stride = width + 3;
    std::vector<float> q(static_cast<size_t>(c.rows * q_stride));
    for (float& x : q) x = normal(rng);
    const int64_t at = 2 * c.head_dim;
    // The causal run and the row-by-row reads over one format's rows.
    const auto check = [&](const auto* keys, const auto* values, const char* what) {
      std::vector<float> run(static_cast<size_t>(c.rows * out_stride), 777.0f);
      std::vector<float> expected = run;
      SoftmaxReadCausalRun(q.data(), q_stride, c.group, keys + at, values + at, c.first_position,
                           c.rows, stride, c.head_dim, run.data(), out_stride);
      for (int64_t i = 0; i < c.rows; ++i) {
        SoftmaxReadGroup(q.data() + i * q_stride, c.group, keys + at, values + at,
                         c.first_position + i + 1, stride, c.head_dim,
                         expected.data() + i * out_stride);
      }
      ExpectNear(run, expected, what);
    };
    check(rows.keys.data(), rows.values.data(), "f32 causal run");
    check(rows.keys16.data(), rows.values16.data(), "bf16 causal run");
    check(rows.keys_f16.data(), rows.values_f16.data(), "f16 causal run");
  }
}

// The sliding-window run: each query reads only the last `window` rows up to its own, windows
// narrower and wider than a key block (128 rows) and than the run, from the start and deep in.
TEST(SoftmaxScanTest, WindowRunEqualsEachRowsWindowRead) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    int group, head_dim;
    int64_t first_position, rows, window;
  };
  for (const Case& c : {Case{1, 64, 0, 300, 1}, Case{1, 64, 0, 300, 17}, Case{4, 32, 100, 130, 256},
                        Case{2, 24, 255, 40, 256}, Case{1, 128, 500, 70, 129},
                        Case{3, 20, 0, 513, 4096}, Case{1, 16, 2000, 200, 300}}) {
    SCOPED_TRACE(testing::Message()
                 << "group " << c.group << ", head_dim " << c.head_dim << ", rows " << c.rows
                 << " from " << c.first_position << ", window " << c.window);
    const int64_t stride = 2 * int64_t{c.head_dim};  // head 1 of 2
    const int64_t total = c.first_position + c.rows;
    const Rows rows = RandomRows(total, stride, rng);
    const int64_t width = int64_t{c.group} * c.head_dim;
    const int64_t q_stride = width + 5, out_stride = width + 3;
    std::vector<float> q(static_cast<size_t>(c.rows * q_stride));
    for (float& x : q) x = normal(rng);
    const float* keys = rows.keys.data() + c.head_dim;
    const float* values = rows.values.data() + c.head_dim;
    std::vector<float> run(static_cast<size_t>(c.rows * out_stride), 777.0f);
    std::vector<float> expected = run;
    SoftmaxReadWindowRun(q.data(), q_stride, c.group, keys, values, c.first_position, c.rows,
                         stride, c.head_dim, c.window, run.data(), out_stride);
    for (int64_t i = 0; i < c.rows; ++i) {
      const int64_t position = c.first_position + i;
      const int64_t oldest = std::max<int64_t>(0, position + 1 - c.window);
      SoftmaxReadGroup(q.data() + i * q_stride, c.group, keys + oldest * stride,
                       values + oldest * stride, position + 1 - oldest, stride, c.head_dim,
                       expected.data() + i * out_stride);
    }
    ExpectNear(run, expected, "window run");
  }
}

// A prompt chunk deep in a long context, as continuous batching serves one (positions in the
// thousands, chunks of at least kSoftmaxBlockedRunRows rows): every query reads thousands of
// cached rows in place, in blocks and register tiles whose edges (a block cut by the chunk's
// first row, tiles of queries cut by the run's end, tails of keys and of columns) all occur.
TEST(SoftmaxScanTest, CausalRunDeepInALongContextEqualsEachRowsRead) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Case {
    int group, head_dim;
    int64_t first_position, rows;
  };
  for (const Case& c : {Case{1, 64, 3000, 64}, Case{4, 64, 5000, 37}, Case{1, 128, 4099, 33},
                        Case{2, 24, 2100, 45}, Case{3, 20, 1000, 32}, Case{1, 32, 8190, 50}}) {
    SCOPED_TRACE(testing::Message() << "group " << c.group << ", head_dim " << c.head_dim
                                    << ", rows " << c.rows << " from " << c.first_position);
    ASSERT_GE(c.rows, kSoftmaxBlockedRunRows);
    const int64_t stride = 2 * int64_t{c.head_dim};  // head 1 of 2
    const int64_t total = c.first_position + c.rows;
    const Rows rows = RandomRows(total, stride, rng);
    const int64_t width = int64_t{c.group} * c.head_dim;
    std::vector<float> q(static_cast<size_t>(c.rows * width));
    for (float& x : q) x = normal(rng);
    const auto check = [&](const auto* keys, const auto* values, const char* what) {
      std::vector<float> run(static_cast<size_t>(c.rows * width), 777.0f);
      std::vector<float> expected = run;
      SoftmaxReadCausalRun(q.data(), width, c.group, keys + c.head_dim, values + c.head_dim,
                           c.first_position, c.rows, stride, c.head_dim, run.data(), width);
      for (int64_t i = 0; i < c.rows; ++i) {
        SoftmaxReadGroup(q.data() + i * width, c.group, keys + c.head_dim, values + c.head_dim,
                         c.first_position + i + 1, stride, c.head_dim, expected.data() + i * width);
      }
      ExpectNear(run, expected, what);
    };
    check(rows.keys.data(), rows.values.data(), "f32 causal run");
    check(rows.keys16.data(), rows.values16.data(), "bf16 causal run");
    check(rows.keys_f16.data(), rows.values_f16.data(), "f16 causal run");
  }
}

// A step of 8 query heads over 2 key/value heads (GQA): a decode row at 3000 cached rows (split
// into pieces on two threads, whole on one), a 37-row prompt run from position 200 (blocked),
// a decode row at 9 rows (one piece) and a speculative verify run of 17 rows from position 1500,
// against the default row-by-row scan on copies of the same caches.
TEST(SoftmaxScanTest, StepWithSplitDecodeRowsEqualsTheRowByRowScan) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Sequence {
    int64_t cached, rows;
    bool verify;
  };
  const Sequence sequences[] = {
      {2999, 1, false}, {200, 37, false}, {8, 1, false}, {1500, 17, true}};
  // GQA (a read per group of four query heads) and MHA (ReadHead reads one head at a time, four
  // rows per step; the step reads every head of a row), and a head_dim with a scalar tail.
  constexpr KvFormat kF32 = KvFormat::kF32, kBf16 = KvFormat::kBf16, kF16 = KvFormat::kF16;
  for (const auto& [q_heads, kv_heads, head_dim, format, threads] : {std::tuple{8, 2, 32, kF32, 2},
                                                                     {8, 2, 32, kBf16, 2},
                                                                     {8, 2, 32, kBf16, 1},
                                                                     {8, 2, 32, kF16, 2},
                                                                     {4, 4, 32, kF32, 2},
                                                                     {4, 4, 32, kBf16, 1},
                                                                     {4, 4, 32, kF16, 1},
                                                                     {4, 4, 20, kF32, 1},
                                                                     {4, 4, 20, kBf16, 2},
                                                                     {4, 4, 20, kF16, 2}}) {
    SCOPED_TRACE(testing::Message()
                 << q_heads << " query heads, " << kv_heads << " kv heads, head_dim " << head_dim
                 << ", " << KvFormatName(format) << ", " << threads << " threads");
    const SoftmaxState state(q_heads, kv_heads, head_dim, {});
    const KernelRowLayout layout = state.PreparedLayout();
    std::vector<KvCache> caches(std::size(sequences)), expected_caches;
    std::vector<StateRef> states;
    std::vector<RowRun> runs;
    for (size_t s = 0; s < caches.size(); ++s) {
      KvCache& kv = caches[s];
      kv.width = state.KvWidth();
      kv.format = format;
      kv.Resize(sequences[s].cached + sequences[s].rows);
      std::vector<float> k(static_cast<size_t>(sequences[s].cached * kv.width)), v(k.size());
      for (float& x : k) x = normal(rng) * 0.4f;
      for (float& x : v) x = normal(rng);
      kv.WriteRows(sequences[s].cached, k.data(), v.data());
      kv.length = sequences[s].cached + sequences[s].rows;  // as the layer sets it
      runs.push_back({static_cast<int64_t>(states.size()), sequences[s].rows});
      for (int64_t r = 0; r < sequences[s].rows; ++r) {
        states.push_back({nullptr, &kv, sequences[s].cached + r, nullptr, sequences[s].verify});
      }
    }
    expected_caches = caches;
    std::vector<StateRef> expected_states = states;
    for (StateRef& s : expected_states) {
      s.kv = &expected_caches[static_cast<size_t>(s.kv - caches.data())];
    }
    const int64_t rows = static_cast<int64_t>(states.size());
    std::vector<float> kernel_rows(static_cast<size_t>(rows * layout.width));
    for (float& x : kernel_rows) x = normal(rng);
    const int64_t out_width = int64_t{q_heads} * head_dim;
    std::vector<float> out(static_cast<size_t>(rows * out_width), 0.0f), expected = out;
    CpuContext ctx(threads);
    state.Scan(ctx,
               {kernel_rows.data(), layout.width, layout, states, runs, out.data(), out_width});
    const ScanArgs plain{kernel_rows.data(), layout.width, layout, expected_states, runs,
                         expected.data(),    out_width};
    for (const RowRun& run : runs) {
      for (int h = 0; h < kv_heads; ++h) state.AttentionState::ScanHead(h, plain, run);
    }
    ExpectNear(out, expected, "step");
    // A decode row's read is the same bits as ReadHead's, split or not, and so is each row of a
    // verify run (long enough to be read in blocks were it a prompt chunk).
    for (const RowRun& run : runs) {
      const bool verify = states[static_cast<size_t>(run.first)].verify;
      if (run.count != 1 && !verify) continue;
      ASSERT_GE(run.count, verify ? kSoftmaxBlockedRunRows : 1);
      for (int64_t c = 0; c < run.count * out_width; ++c) {
        const size_t at = static_cast<size_t>(run.first * out_width + c);
        ASSERT_EQ(out[at], expected[at])
            << "row " << run.first + c / out_width << " column " << c % out_width;
      }
    }
    for (size_t s = 0; s < caches.size(); ++s) {
      EXPECT_EQ(caches[s].keys, expected_caches[s].keys);
      EXPECT_EQ(caches[s].keys16, expected_caches[s].keys16);
      EXPECT_EQ(caches[s].values16, expected_caches[s].values16);
    }
  }
}

}  // namespace
}  // namespace abcd
