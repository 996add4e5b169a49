// GMAT encoder (Gupta & Berant 2020, Eq. 3; models/abcd_ref/gmat.py is the reference):
// the encoder runs over [source; M memory tokens]. Memory rows start as encoder.memory_embed
// (no scaling, no position); every layer is softmax attention with the layer's q/k/v/o for
// both kinds of rows, where a source row sees the source rows of its chunk plus all memory rows
// and a memory row sees every row. With output "memory" the last layer computes only the memory
// rows (nothing reads the source rows after it).
#include <algorithm>
#include <vector>

#include "engine/attention/softmax_state.h"
#include "engine/model/model.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/matmul.h"

namespace abcd {
namespace {

// Query rows [first, first + count) that read the same keys: main rows of one chunk (keys: that
// chunk's rows, gathered with the memory rows) or rows that see every row (contiguous keys).
struct QueryBlock {
  int64_t first = 0;
  int64_t count = 0;
  int64_t chunk_first = 0;  // gathered chunk keys [chunk_first, chunk_first + chunk_count)
  int64_t chunk_count = 0;
  bool gather = false;
};

// Rows per task for the queries that see every row (keeps the heads x blocks tasks balanced).
constexpr int64_t kRowsPerTask = 32;

std::vector<QueryBlock> PlanQueries(int64_t main, int64_t total, int64_t chunk,
                                    int64_t query_first) {
  std::vector<QueryBlock> blocks;
  for (int64_t r = query_first; r < total;) {
    QueryBlock b;
    b.first = r;
    if (r < main && chunk > 0) {
      const int64_t lo = r / chunk * chunk, hi = std::min(lo + chunk, main);
      b.count = hi - r;
      // A chunk covering every main row reads all rows: no gather needed.
      b.gather = !(lo == 0 && hi == main);
      b.chunk_first = lo;
      b.chunk_count = hi - lo;
    } else {
      b.count = std::min(kRowsPerTask, (r < main ? main : total) - r);
    }
    blocks.push_back(b);
    r += b.count;
  }
  return blocks;
}

}  // namespace

void Model::GmatAttention(CpuContext& ctx, const AttentionLayer& layer, const float* x,
                          int64_t main, int64_t query_first, float* out) const {
  const int64_t d = config_.d_model, total = main + config_.gmat->memory;
  const int64_t memory = total - main;
  const int dh = config_.head_dim(), heads = config_.n_heads;
  const int64_t width = static_cast<int64_t>(layer.fused_bias().size());  // [q; k; v]
  float* projection = ctx.Buffer(Scratch::kProjection, total * width);
  float* attended = ctx.Buffer(Scratch::kAttended, total * d);
  cpu::Linear(x, total, layer.fused_matrix(), layer.fused_bias().data(), projection, ctx);
  const std::vector<QueryBlock> blocks =
      PlanQueries(main, total, layer.spec().gmat_chunk, query_first);
  const int64_t tasks = heads * static_cast<int64_t>(blocks.size());
  ctx.pool().ParallelFor(tasks, [&](int64_t task) {
    const int64_t h = task % heads;
    const QueryBlock& b = blocks[static_cast<size_t>(task / heads)];
    const float* keys = projection + d + h * dh;
    const float* values = projection + 2 * d + h * dh;
    int64_t count = total, stride = width;
    std::vector<float> gathered;
    if (b.gather) {
      // [chunk rows; memory rows] of this head, dh floats apart.
      count = b.chunk_count + memory;
      stride = dh;
      gathered.resize(static_cast<size_t>(2 * count * dh));
      float* k = gathered.data();
      float* v = k + count * dh;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t row = i < b.chunk_count ? b.chunk_first + i : main + (i - b.chunk_count);
        std::copy_n(keys + row * width, dh, k + i * dh);
        std::copy_n(values + row * width, dh, v + i * dh);
      }
      keys = k;
      values = v;
    }
    for (int64_t r = b.first; r < b.first + b.count; ++r) {
      SoftmaxReadHead(projection + r * width + h * dh, keys, values, count, stride, dh,
                      attended + r * d + h * dh);
    }
  });
  cpu::Linear(attended + query_first * d, total - query_first, layer.out_matrix(),
              layer.out_bias().data(), out + query_first * d, ctx);
}

const float* Model::RunGmatEncoder(CpuContext& ctx, std::span<const int32_t> source) const {
  const int64_t main = static_cast<int64_t>(source.size()), d = config_.d_model;
  const int64_t total = main + config_.gmat->memory;
  float* x = ctx.Buffer(Scratch::kResidual, total * d);
  float* normed = ctx.Buffer(Scratch::kNormed, total * d);
  float* delta = ctx.Buffer(Scratch::kDelta, total * d);
  for (int64_t r = 0; r < main; ++r) Embed(source[r], r, x + r * d);
  std::copy(memory_embed_.begin(), memory_embed_.end(), x + main * d);
  const float eps = config_.layer_norm_eps;
  const size_t layers = encoder_->blocks.size();
  for (size_t l = 0; l < layers; ++l) {
    const Block& block = encoder_->blocks[l];
    // Every row is a key of this layer; the rows past it that are still read: all, or for the
    // last layer with output "memory" the memory rows only.
    const int64_t first = (l + 1 == layers && !config_.gmat->output_all) ? main : 0;
    const int64_t rows = total - first;
    float* xs = x + first * d;
    float* ns = normed + first * d;
    float* ds = delta + first * d;
    cpu::LayerNorm(x, total, d, block.ln1_weight.data(), block.ln1_bias.data(), eps, normed);
    GmatAttention(ctx, *block.self_attention, normed, main, first, delta);
    cpu::AddInPlace(xs, ds, rows * d);
    cpu::LayerNorm(xs, rows, d, block.ln2_weight.data(), block.ln2_bias.data(), eps, ns);
    FeedForward(ctx, block, ns, rows, ds);
    cpu::AddInPlace(xs, ds, rows * d);
  }
  const int64_t out_first = config_.gmat->output_all ? 0 : main;
  cpu::LayerNorm(x + out_first * d, total - out_first, d, encoder_->ln_f_weight.data(),
                 encoder_->ln_f_bias.data(), eps, normed);
  return normed;
}

}  // namespace abcd
