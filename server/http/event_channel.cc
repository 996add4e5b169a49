#include "server/http/event_channel.h"

#include <utility>

namespace abcd::http {

EventCallback EventChannel::Callback(std::shared_ptr<EventChannel> channel) {
  return [channel = std::move(channel)](GenerationEvent event) { channel->Push(std::move(event)); };
}

void EventChannel::Push(GenerationEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
  if (listener_ && !notified_) {
    notified_ = true;
    listener_();
  }
}

void EventChannel::MoveEventsLocked(std::vector<GenerationEvent>* out) {
  for (GenerationEvent& event : events_) out->push_back(std::move(event));
  events_.clear();
}

void EventChannel::TakeAll(std::vector<GenerationEvent>* out) {
  absl::MutexLock lock(&mu_);
  notified_ = false;
  MoveEventsLocked(out);
}

void EventChannel::SetListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
  notified_ = false;
  if (listener_ && !events_.empty()) {
    notified_ = true;
    listener_();
  }
}

void EventChannel::ClearListener() {
  std::function<void()> old;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  old = std::move(listener_);
  listener_ = nullptr;
}

}  // namespace abcd::http
