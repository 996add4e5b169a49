#include "server/metrics/transport_metrics.h"

#include <utility>

namespace abcd {
namespace {

// A counter follows a cumulative figure: it only ever moves up.
void Advance(prometheus::Counter* counter, int64_t total) {
  const double delta = static_cast<double>(total) - counter->Value();
  if (delta > 0) counter->Increment(delta);
}

}  // namespace

TransportMetrics::TransportMetrics(prometheus::Registry& registry, const BodyBudget* budget)
    : budget_(budget) {
  inflight_ = &prometheus::BuildGauge()
                   .Name("abcd_inflight_body_bytes")
                   .Help("Bytes of request bodies held now (charged to the body budget).")
                   .Register(registry)
                   .Add({});
  limit_ = &prometheus::BuildGauge()
                .Name("abcd_inflight_body_bytes_limit")
                .Help("The request body budget in bytes (--max_inflight_body_mb).")
                .Register(registry)
                .Add({});
  auto& refusals = prometheus::BuildCounter()
                       .Name("abcd_body_budget_refusals_total")
                       .Help(
                           "Request bodies refused because the body budget was full, by "
                           "protocol (http: 503, grpc: RESOURCE_EXHAUSTED).")
                       .Register(registry);
  refused_http_ = &refusals.Add({{"protocol", "http"}});
  refused_grpc_ = &refusals.Add({{"protocol", "grpc"}});
  evicted_ = &prometheus::BuildCounter()
                  .Name("abcd_http_connections_evicted_total")
                  .Help(
                      "Idle HTTP connections closed to make room for new ones at "
                      "--http_max_connections.")
                  .Register(registry)
                  .Add({});
}

void TransportMetrics::set_evicted_connections(std::function<int64_t()> source) {
  absl::MutexLock lock(&mu_);
  evicted_source_ = std::move(source);
}

void TransportMetrics::Refresh() {
  if (budget_ != nullptr) {
    inflight_->Set(static_cast<double>(budget_->used()));
    limit_->Set(static_cast<double>(budget_->capacity()));
    Advance(refused_http_, budget_->refused_http());
    Advance(refused_grpc_, budget_->refused_grpc());
  }
  absl::MutexLock lock(&mu_);
  if (evicted_source_) Advance(evicted_, evicted_source_());
}

}  // namespace abcd
