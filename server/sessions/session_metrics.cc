#include "server/sessions/session_metrics.h"

#include <limits>
#include <string>

namespace abcd {
namespace {

prometheus::Counter* AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge* AddGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

double GaugeValue(int64_t value) {
  return value < 0 ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(value);
}

}  // namespace

SessionMetrics::SessionMetrics(prometheus::Registry& registry)
    : stored_(AddGauge(registry, "abcd_sessions_stored",
                       "Sessions in the session store (NaN: not known to this process, redis).")),
      bytes_(AddGauge(registry, "abcd_session_bytes",
                      "Bytes of session blobs in the session store (NaN: not known, redis).")),
      evictions_(AddCounter(registry, "abcd_session_evictions_total",
                            "Sessions evicted by the memory store's byte budget (LRU).")),
      hits_(AddCounter(registry, "abcd_session_hits_total",
                       "Requests that continued a stored session.")),
      misses_(AddCounter(registry, "abcd_session_misses_total",
                         "Requests naming a session that is unknown or expired.")),
      store_errors_(AddCounter(registry, "abcd_session_store_errors_total",
                               "Session store operations that failed (e.g. Redis unavailable).")) {}

void SessionMetrics::Refresh(const SessionStoreStats& stats) {
  stored_->Set(GaugeValue(stats.sessions));
  bytes_->Set(GaugeValue(stats.bytes));
  absl::MutexLock lock(&mu_);
  if (stats.evictions > evictions_seen_) {
    evictions_->Increment(static_cast<double>(stats.evictions - evictions_seen_));
    evictions_seen_ = stats.evictions;
  }
}

}  // namespace abcd
