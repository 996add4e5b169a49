#include "engine/scheduler/capacity_scheduler.h"

namespace abcd {
bool CanAdmit(const CapacityLimits& limits, int64_t need, int sequences) {
  if (limits.running_sequences > 0 && limits.running_sequences + sequences > limits.max_running) {
    return false;
  }
  return limits.reserved_bytes + need <= limits.budget_bytes;
}

}  // namespace abcd
