// ParallelRowRanges: per-row work (norms, activation rounding and quantisation) split into
// contiguous row ranges across a ThreadPool, or kept on the caller where the split would not
// pay. Thread-safety: as ThreadPool::ParallelFor (one caller at a time; fn runs concurrently on
// disjoint ranges).
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/core/thread_pool.h"

namespace abcd {

// fn(first, count) over rows [0, rows), split into about two contiguous ranges per thread of
// `pool`, or fn(0, rows) on the caller alone where there is no pool, a pool of one, a single
// row, or fewer than `min_values` values in all (rows x values_per_row). The ranges depend only
// on rows and pool->size(); work done row by row gives the same bits however it is split.
template <typename Fn>
void ParallelRowRanges(ThreadPool* pool, int64_t rows, int64_t values_per_row, int64_t min_values,
                       const Fn& fn) {
  if (pool == nullptr || pool->size() == 1 || rows < 2 || rows * values_per_row < min_values) {
    fn(int64_t{0}, rows);
    return;
  }
  const int64_t tasks = std::min<int64_t>(rows, 2 * int64_t{pool->size()});
  pool->ParallelFor(tasks, [&](int64_t t) {
    const int64_t first = rows * t / tasks, last = rows * (t + 1) / tasks;
    fn(first, last - first);
  });
}

}  // namespace abcd
