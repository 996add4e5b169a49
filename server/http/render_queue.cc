#include "server/http/render_queue.h"

#include <algorithm>
#include <utility>

namespace abcd::http {

RenderQueue::RenderQueue(int threads, size_t capacity) : capacity_(capacity) {
  const int n = std::max(threads, 1);
  workers_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { Work(); });
}

RenderQueue::~RenderQueue() { Stop(); }

bool RenderQueue::Submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || jobs_.size() >= capacity_) return false;
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
  return true;
}

void RenderQueue::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    dropped.swap(jobs_);
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  // `dropped` is destroyed here, outside the lock (a job may hold the last reference to an
  // exchange).
}

size_t RenderQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.size();
}

void RenderQueue::Work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace abcd::http
