// Hands one request's GenerationEvents from the engine thread to the HTTP thread serving it.
//
// The executor's callback runs on the engine thread and must never block, so it only appends
// to this queue under a short mutex (Push) and wakes the waiting HTTP thread (Take). The
// channel is shared (std::shared_ptr) between the callback and the handler because the engine
// may deliver the last event after the handler has gone (client disconnect, server stop).
//
// Thread-safety: Push from any thread; Take from one consumer thread at a time.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "engine/scheduler/executor.h"

namespace abcd::http {

class EventChannel {
 public:
  // A callback for Executor::Enqueue that pushes into `channel` (and keeps it alive).
  static EventCallback Callback(std::shared_ptr<EventChannel> channel);

  void Push(GenerationEvent event);

  // Appends every queued event to *out, waiting up to `timeout` while none is queued.
  // Returns false when nothing arrived in time.
  bool Take(std::vector<GenerationEvent>* out, absl::Duration timeout);

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<GenerationEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace abcd::http
