#include "engine/core/thread_pool.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>

namespace abcd {
namespace {

// How long an idle worker polls for the next job before it sleeps: a decode step's ops follow
// each other within microseconds, an idle server's steps do not come at all.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// futex(2) on the generation counter (libstdc++ 12's atomic::wait can miss a wake-up).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  FutexWakeAll(&generation_);
  for (std::thread& t : workers_) t.join();
}

int ThreadPool::AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int count = CPU_COUNT(&set);
  return count > 0 ? count : 1;
}

void ThreadPool::RunTasks() {
  for (int64_t t = next_task_.fetch_add(1); t < tasks_; t = next_task_.fetch_add(1)) (*job_)(t);
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = 0;  // the generation before the first job (a worker may start after it)
  while (true) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    uint32_t now = generation_.load(std::memory_order_acquire);
    while (now == seen && std::chrono::steady_clock::now() < spin_until) {
      CpuRelax();
      now = generation_.load(std::memory_order_acquire);
    }
    while (now == seen) {
      // Dekker with ParallelFor: count ourselves as asleep, then look again; it bumps the
      // generation, then looks at the count. One of us sees the other (seq_cst).
      sleepers_.fetch_add(1);
      if (generation_.load() == seen) FutexWait(&generation_, seen);
      sleepers_.fetch_sub(1);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load()) return;
    RunTasks();
    workers_running_.fetch_sub(1, std::memory_order_release);
  }
}

void ThreadPool::ParallelFor(int64_t tasks, absl::FunctionRef<void(int64_t)> fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
    return;
  }
  job_ = &fn;
  tasks_ = tasks;
  next_task_.store(0, std::memory_order_relaxed);
  workers_running_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) FutexWakeAll(&generation_);
  RunTasks();
  // Every worker has left RunTasks, so every task is done and nobody reads job_ any more.
  while (workers_running_.load(std::memory_order_acquire) != 0) CpuRelax();
}

}  // namespace abcd
