// The session metrics, on a prometheus-cpp registry (the server's: ServerMetrics::registry()):
//
//   abcd_sessions_stored            gauge    } Refresh(store.Stats()): sessions and blob bytes in
//   abcd_session_bytes              gauge    } the store; NaN where the store does not know (redis)
//   abcd_session_evictions_total    counter  Refresh(): the store's eviction count (memory LRU)
//   abcd_session_hits_total         counter  CountHit(): Continue found the session
//   abcd_session_misses_total       counter  CountMiss(): Continue on an unknown or expired id
//   abcd_session_store_errors_total counter  CountStoreError(): the store failed or refused
//                                            (UNAVAILABLE, RESOURCE_EXHAUSTED: over the memory
//                                            budget, ...), not NOT_FOUND/ABORTED/bad input
//
// Handles are resolved in the constructor. Thread-safety: every method may be called from any
// thread.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/sessions/session_store.h"

namespace abcd {

class SessionMetrics {
 public:
  // Registers the families above on `registry`, which must outlive this object.
  explicit SessionMetrics(prometheus::Registry& registry);
  SessionMetrics(const SessionMetrics&) = delete;
  SessionMetrics& operator=(const SessionMetrics&) = delete;

  void CountHit() { hits_->Increment(); }
  void CountMiss() { misses_->Increment(); }
  void CountStoreError() { store_errors_->Increment(); }
  // Sets the gauges from `stats` (-1: NaN) and adds the evictions since the last Refresh.
  void Refresh(const SessionStoreStats& stats);

 private:
  prometheus::Gauge* stored_ = nullptr;
  prometheus::Gauge* bytes_ = nullptr;
  prometheus::Counter* evictions_ = nullptr;
  prometheus::Counter* hits_ = nullptr;
  prometheus::Counter* misses_ = nullptr;
  prometheus::Counter* store_errors_ = nullptr;

  absl::Mutex mu_;
  int64_t evictions_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace abcd
