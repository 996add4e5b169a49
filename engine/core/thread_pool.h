// A fixed set of worker threads owned by one backend, for splitting one op's work (the panels of
// a matrix product, the (sequence, head) pairs of an attention scan) across cores.
//
// ParallelFor(tasks, fn) runs fn(task) for every task in [0, tasks) on the caller and the
// workers, and returns when all are done; tasks are handed out one at a time from a shared
// counter, so uneven tasks balance, and a worker the OS has descheduled (another process on the
// core) is simply not waited for: the caller takes the tasks it did not claim. Workers yield
// the core once after each job (network threads may be waiting for it), spin briefly for the
// next (decode steps come back to back) and then sleep on a futex, so an idle server burns no
// CPU.
//
// Thread-safety: ParallelFor must be called from one thread at a time (the engine thread that
// owns the backend); fn must be safe to run concurrently for different tasks. A pool of size 1
// has no workers and runs everything on the caller.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace abcd {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void ParallelFor(int64_t tasks, absl::FunctionRef<void(int64_t)> fn);

  // The threads this process may run on (sched_getaffinity), at least 1.
  static int AvailableCores();

 private:
  void WorkerLoop();
  void RunTasks(uint32_t generation);

  std::vector<std::thread> workers_;
  // Bumped for every job; idle workers wait for it to change.
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  // Which job, how many tasks and the next unclaimed one, in one word (see RunTasks).
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};                     // tasks of the current job that have finished
  std::atomic<int> sleepers_{0};                     // workers in (or about to enter) a futex wait
  absl::FunctionRef<void(int64_t)>* job_ = nullptr;  // valid while a task of its job is claimed
};

}  // namespace abcd
