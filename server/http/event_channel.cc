#include "server/http/event_channel.h"

#include <utility>

namespace abcd::http {

EventCallback EventChannel::Callback(std::shared_ptr<EventChannel> channel) {
  return [channel = std::move(channel)](GenerationEvent event) { channel->Push(std::move(event)); };
}

void EventChannel::Push(GenerationEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

bool EventChannel::Take(std::vector<GenerationEvent>* out, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_events = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&has_events), timeout);
  if (events_.empty()) return false;
  for (GenerationEvent& event : events_) out->push_back(std::move(event));
  events_.clear();
  return true;
}

}  // namespace abcd::http
