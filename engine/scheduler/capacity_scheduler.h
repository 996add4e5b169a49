// Capacity scheduling: which waiting requests to admit this iteration. A request is admitted
// only when its worst-case state bytes (fixed blocks for every sequence it may hold, plus KV
// pages for prompt + max_tokens on softmax layers) fit beside what running requests have
// reserved (RequestStateBytes, engine/state/request_state_bytes.h), so a running sequence is
// never preempted. First come, first served: the head of
// the queue is never overtaken, so a large request cannot starve (the one exception: a request
// that waits for a prefix snapshot another running request is about to store lets others by).
#pragma once

#include <cstdint>
#include <span>

#include "engine/state/request_state_bytes.h"

namespace abcd {

struct CapacityLimits {
  int64_t budget_bytes = 0;
  int64_t reserved_bytes = 0;  // held by admitted requests
  int running_sequences = 0;
  int max_running = 0;
};

// Whether a request of `need` bytes and `sequences` sequences (n choices) may start now. The
// caller walks its queue in order and stops at the first that cannot (so nobody overtakes it).
// With nothing running, one request is admitted whatever its sequence count.
bool CanAdmit(const CapacityLimits& limits, int64_t need, int sequences);

}  // namespace abcd
