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

}  // namespace abcd::http
