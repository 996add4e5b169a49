// Hands one request's GenerationEvents from the engine thread to the connection serving it.
//
// The executor's callback runs on the engine thread and must never block, so it only appends
// to this queue under a short mutex (Push) and, if a listener is set and has not been told
// since the last TakeAll, calls it (under that mutex: after ClearListener returns it is never
// called again). The listener only schedules work (Exchange::Dispatch); the connection then
// takes the events with TakeAll, so no I/O thread ever waits on an executor.
//
// The channel is shared (std::shared_ptr) between the callback and the handler because the
// engine may deliver the last event after the handler has gone (client disconnect, server stop).
//
// Thread-safety: Push from any thread; TakeAll from one consumer at a time; SetListener and
// ClearListener from the consumer. The members are guarded by one absl::Mutex (checked by
// clang's -Wthread-safety: tests/check_thread_safety.py).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/executor.h"

namespace abcd::http {

class EventChannel {
 public:
  // A callback for Executor::Enqueue that pushes into `channel` (and keeps it alive).
  static EventCallback Callback(std::shared_ptr<EventChannel> channel);

  void Push(GenerationEvent event);

  // Appends every queued event to *out without waiting; re-arms the listener.
  void TakeAll(std::vector<GenerationEvent>* out);

  // `listener` is called (once until the next TakeAll) when an event arrives; if events are
  // already queued it is called now.
  void SetListener(std::function<void()> listener);
  void ClearListener();

 private:
  void MoveEventsLocked(std::vector<GenerationEvent>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::deque<GenerationEvent> events_ ABSL_GUARDED_BY(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace abcd::http
