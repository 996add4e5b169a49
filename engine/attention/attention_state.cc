#include "engine/attention/attention_state.h"

#include <algorithm>
#include <cmath>

namespace abcd {

void AttentionState::Scan(CpuContext& ctx, const ScanArgs& args) const {
  const int64_t n = heads();
  ctx.pool().ParallelFor(static_cast<int64_t>(args.runs.size()) * n, [&](int64_t task) {
    ScanHead(static_cast<int>(task % n), args, args.runs[static_cast<size_t>(task / n)]);
  });
}

void AttentionState::ScanHead(int head, const ScanArgs& args, const RowRun& run) const {
  for (int64_t r = run.first; r < run.first + run.count; ++r) {
    const StateRef& state = args.states[static_cast<size_t>(r)];
    UpdateHead(head, args.KeyValueOf(r), state);
    ReadHead(head, args.rows + r * args.width, state, args.out + r * args.out_width);
  }
}

}  // namespace abcd
