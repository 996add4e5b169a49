// Arrival processes and the measured phase.
//
// Closed loop: `concurrency` requests are kept in flight; each completion issues the next.
// Open loop: requests arrive at `request_rate` per second with gamma-distributed gaps of shape
// `burstiness` (1 = Poisson; < 1 burstier; > 1 more regular; the mean gap is 1/rate either
// way, as in `vllm bench serve`), optionally capped at `max_concurrency` in flight (a capped
// request waits; the wait is its client queue time). Issuing stops at `num_requests` or after
// `duration_s`, whichever comes first; requests in flight then finish (up to `drain_timeout_s`,
// after which they are cancelled and count as failed).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "loadtest/lib/driver.h"
#include "loadtest/lib/workload.h"

namespace abcd::loadtest {

// Gaps between arrivals: Gamma(shape = burstiness, scale = 1 / (rate * burstiness)).
class ArrivalProcess {
 public:
  ArrivalProcess(double rate, double burstiness, uint64_t seed);
  // Seconds until the next arrival.
  double NextGap();

 private:
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gamma_;
};

struct PhaseOptions {
  int concurrency = 0;      // closed loop when request_rate <= 0
  double request_rate = 0;  // open loop, requests per second
  double burstiness = 1.0;
  int max_concurrency = 0;   // open loop cap; 0 = none
  int64_t num_requests = 0;  // 0 = no count bound
  double duration_s = 0;     // 0 = no time bound
  double drain_timeout_s = 300;
  uint64_t seed = 0;
};

struct PhaseResult {
  std::vector<RequestRecord> records;  // in completion order
  Clock::time_point start;             // first send
  Clock::time_point end;               // last completion
  int64_t cancelled_at_drain = 0;
};

// Sends workload requests first_index, first_index + 1, ... through `driver`.
PhaseResult RunPhase(Driver& driver, const Workload& workload, const PhaseOptions& options,
                     int64_t first_index);

}  // namespace abcd::loadtest
