// The transport's memory and connection metrics, on the server's registry
// (ServerMetrics::registry()), refreshed at every scrape (a ServerMetrics render hook):
//
//   abcd_inflight_body_bytes                  gauge    } request bodies held now / the budget
//   abcd_inflight_body_bytes_limit            gauge    } (--max_inflight_body_mb, body_budget.h)
//   abcd_body_budget_refusals_total{protocol} counter  bodies refused for the budget (http: 503,
//                                                      grpc: RESOURCE_EXHAUSTED)
//   abcd_http_connections_evicted_total       counter  idle connections closed to make room at
//                                                      --http_max_connections
//
// Thread-safety: Refresh and set_evicted_connections may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "server/core/body_budget.h"

namespace abcd {

class TransportMetrics {
 public:
  // `registry` and `budget` must outlive this object.
  TransportMetrics(prometheus::Registry& registry, const BodyBudget* budget);
  TransportMetrics(const TransportMetrics&) = delete;
  TransportMetrics& operator=(const TransportMetrics&) = delete;

  // Where the evicted-connection count comes from (cumulative); unset: 0.
  void set_evicted_connections(std::function<int64_t()> source);
  void Refresh();

 private:
  const BodyBudget* const budget_;
  prometheus::Gauge* inflight_ = nullptr;
  prometheus::Gauge* limit_ = nullptr;
  prometheus::Counter* refused_http_ = nullptr;
  prometheus::Counter* refused_grpc_ = nullptr;
  prometheus::Counter* evicted_ = nullptr;
  absl::Mutex mu_;
  std::function<int64_t()> evicted_source_ ABSL_GUARDED_BY(mu_);
};

}  // namespace abcd
