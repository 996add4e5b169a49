#include "server/http/event_channel.h"

#include <utility>

namespace abcd::http {

EventCallback EventChannel::Callback(std::shared_ptr<EventChannel> channel) {
  return [channel = std::move(channel)](GenerationEvent event) { channel->Push(std::move(event)); };
}

void EventChannel::Push(GenerationEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    if (listener_ && !notified_) {
      notified_ = true;
      listener_();
    }
  }
  ready_.notify_one();
}

bool EventChannel::Take(std::vector<GenerationEvent>* out, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  ready_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return !events_.empty(); });
  if (events_.empty()) return false;
  for (GenerationEvent& event : events_) out->push_back(std::move(event));
  events_.clear();
  return true;
}

void EventChannel::TakeAll(std::vector<GenerationEvent>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  notified_ = false;
  for (GenerationEvent& event : events_) out->push_back(std::move(event));
  events_.clear();
}

void EventChannel::SetListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
  notified_ = false;
  if (listener_ && !events_.empty()) {
    notified_ = true;
    listener_();
  }
}

void EventChannel::ClearListener() {
  std::function<void()> old;
  std::lock_guard<std::mutex> lock(mu_);
  old = std::move(listener_);
  listener_ = nullptr;
}

}  // namespace abcd::http
