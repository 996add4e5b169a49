#include "loadtest/lib/runner.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace abcd::loadtest {

ArrivalProcess::ArrivalProcess(double rate, double burstiness, uint64_t seed)
    : rng_(seed), gamma_(burstiness, 1.0 / (rate * burstiness)) {}

double ArrivalProcess::NextGap() { return gamma_(rng_); }

namespace {

// Requests in flight and the records of finished ones; callbacks arrive on driver threads.
class Tracker {
 public:
  void Started() {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
  }
  void Finished(RequestRecord record) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(std::move(record));
    --in_flight_;
    cv_.notify_all();
  }
  // Waits until fewer than `limit` are in flight, or until `deadline`; true when below.
  bool WaitBelow(int64_t limit, std::optional<Clock::time_point> deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    auto below = [&] { return in_flight_ < limit; };
    if (!deadline) {
      cv_.wait(lock, below);
      return true;
    }
    return cv_.wait_until(lock, *deadline, below);
  }
  int64_t in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  std::vector<RequestRecord> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(records_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t in_flight_ = 0;
  std::vector<RequestRecord> records_;
};

}  // namespace

PhaseResult RunPhase(Driver& driver, const Workload& workload, const PhaseOptions& options,
                     int64_t first_index) {
  // Shared with the callbacks, which could (after a failed drain) outlive this call.
  auto tracker_ptr = std::make_shared<Tracker>();
  Tracker& tracker = *tracker_ptr;
  PhaseResult result;
  const bool open_loop = options.request_rate > 0;
  int64_t issued = 0;
  auto issue = [&](std::optional<Clock::time_point> arrival) {
    RequestSpec spec = workload.Make(first_index + issued);
    ++issued;
    tracker.Started();
    driver.Start(spec, [tracker_ptr, arrival](RequestRecord record) {
      record.arrival = arrival && *arrival < record.send ? *arrival : record.send;
      tracker_ptr->Finished(std::move(record));
    });
  };
  const auto count_reached = [&] {
    return options.num_requests > 0 && issued >= options.num_requests;
  };

  result.start = Clock::now();
  std::optional<Clock::time_point> deadline;
  if (options.duration_s > 0) {
    deadline = result.start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(options.duration_s));
  }
  const auto time_up = [&] { return deadline && Clock::now() >= *deadline; };

  if (!open_loop) {
    const int64_t concurrency = std::max(1, options.concurrency);
    while (!count_reached() && !time_up()) {
      if (!tracker.WaitBelow(concurrency, deadline)) break;
      if (time_up()) break;
      issue(std::nullopt);
    }
  } else {
    const bool infinite = std::isinf(options.request_rate);
    ArrivalProcess arrivals(infinite ? 1.0 : options.request_rate, options.burstiness,
                            options.seed);
    Clock::time_point next = result.start;
    while (!count_reached()) {
      if (issued > 0 && !infinite) {
        next += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(arrivals.NextGap()));
      }
      if (deadline && next >= *deadline) break;
      std::this_thread::sleep_until(next);
      if (options.max_concurrency > 0 && !tracker.WaitBelow(options.max_concurrency, deadline)) {
        break;
      }
      if (time_up()) break;
      issue(next);
    }
  }

  // Let what is in flight finish; then cancel the stragglers.
  const Clock::time_point drain_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options.drain_timeout_s));
  if (!tracker.WaitBelow(1, drain_deadline)) {
    result.cancelled_at_drain = tracker.in_flight();
    driver.CancelAll();
    tracker.WaitBelow(1, Clock::now() + std::chrono::seconds(30));
  }
  result.records = tracker.Take();
  result.end = result.start;
  for (const RequestRecord& r : result.records) result.end = std::max(result.end, r.end);
  return result;
}

}  // namespace abcd::loadtest
