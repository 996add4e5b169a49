// Work that must not run on an HTTP I/O thread: rendering a chat template (bounded in work by
// RenderLimits, but still up to about a second of CPU) and tokenizing what it produced. A fixed
// set of worker threads, owned by the queue and started by its constructor, takes jobs from a
// bounded FIFO; the I/O threads only enqueue, so /healthz, /metrics and completions answer
// whatever a chat template is doing.
//
// Submit refuses (returns false, the job not run) when `capacity` jobs are already waiting or
// the queue is stopping: the caller answers 429 / 503. Jobs must watch their own cancellation
// (the client gone, the server draining); Stop() runs no new job, waits for the running ones and
// joins the workers. Jobs still queued at Stop are destroyed unrun.
//
// Thread-safety: Submit from any thread; Stop from one controlling thread (also the
// destructor).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace abcd::http {

class RenderQueue {
 public:
  RenderQueue(int threads, size_t capacity);
  ~RenderQueue();  // Stop()s
  RenderQueue(const RenderQueue&) = delete;
  RenderQueue& operator=(const RenderQueue&) = delete;

  bool Submit(std::function<void()> job);
  void Stop();

  // Jobs waiting (not yet running), for tests.
  size_t waiting() const;

 private:
  void Work();

  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;  // guarded by mutex_
  bool stopping_ = false;                   // guarded by mutex_
  std::vector<std::thread> workers_;
};

}  // namespace abcd::http
