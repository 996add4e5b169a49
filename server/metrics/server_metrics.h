// The server's Prometheus metrics. The names below are a wire contract (dashboards and alerts
// depend on them): base units, low-cardinality labels only.
//
//   abcd_requests_total{kind,status}          counter    CountRequest()
//   abcd_prompt_tokens_total                  counter    observers: OnRequestFinished
//   abcd_generated_tokens_total               counter    observers: OnTokensGenerated
//   abcd_time_to_first_token_seconds          histogram  observers: OnFirstToken
//   abcd_inter_token_latency_seconds          histogram  observers: OnToken
//   abcd_request_duration_seconds             histogram  observers: OnRequestFinished
//   abcd_batch_size                           histogram  observers: OnIteration (batch > 0)
//   abcd_running_sequences                    gauge      } latest ExecutorStats of every
//   abcd_waiting_requests                     gauge      } model, summed at Render()
//   abcd_state_bytes_in_use                   gauge      }
//   abcd_state_bytes_capacity                 gauge      }
//   abcd_kv_cache_bytes                       gauge      }
//   abcd_kv_cache_spare_bytes                 gauge      }
//   abcd_state_bytes_per_sequence{model}      gauge      AddModel()
//   abcd_prefix_cache_bytes{model}            gauge      } the model's latest ExecutorStats
//   abcd_prefix_cache_entries{model}          gauge      } (observers: OnIteration), set at
//   abcd_prefix_cache_queried_tokens_total{model} counter } Render(); the counters follow
//   abcd_prefix_cache_hit_tokens_total{model} counter    } the executor's cumulative figures
//   abcd_prefix_cache_evictions_total{model}  counter    }
//   abcd_prefix_cache_miss_tokens_total{model,reason}  counter } reason: evicted, not_cached,
//                                                   last_token (PrefixCacheCounters)
//   abcd_prefix_cache_lookups_total{model,outcome}     counter } outcome: hit, partial, evicted,
//                                                   miss
//   abcd_speculative_draft_tokens_total{model}    counter  observers: OnSpeculation (tokens
//   abcd_speculative_accepted_tokens_total{model} counter  drafted / kept by speculative decoding)
//   abcd_prefill_overdue_iterations_total{model}  counter  observers: OnOverduePrefill
//                                                   (iterations widened for overdue prompts)
//
// Registry and exposition are prometheus-cpp's (prometheus::Registry, TextSerializer); every
// handle is resolved at start-up. Every {kind,status} pair is registered up front, so
// CountRequest() is a lookup in a fixed table; values outside the sets map to kind "other" /
// status "internal". Observers update counters (atomic) and histograms (prometheus-cpp takes a
// short per-histogram lock) and store the models' latest stats in atomics that Render() sums;
// a scrape never waits for an engine iteration.
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/scheduler/executor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace abcd {

class ServerMetrics {
 public:
  // "sessions": the session operations (gRPC Get/Delete/Export/ImportSession, HTTP
  // /v1/sessions routes).
  static constexpr std::array<absl::string_view, 7> kRequestKinds = {
      "generate", "translate", "completions", "chat", "list_models", "sessions", "other"};
  static constexpr std::array<absl::string_view, 10> kRequestStatuses = {
      "ok",        "invalid_argument",  "resource_exhausted",
      "cancelled", "deadline_exceeded", "unavailable",
      "not_found", "aborted",           "failed_precondition",
      "internal"};

  // The exposition's Content-Type (text format 0.0.4).
  static constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

  // Registers every family of the contract (fixed, valid names: prometheus-cpp cannot refuse
  // them).
  ServerMetrics();
  ~ServerMetrics();
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // kind: one of kRequestKinds (else "other"); status: one of kRequestStatuses (else
  // "internal").
  void CountRequest(absl::string_view kind, absl::string_view status);
  void CountRequest(absl::string_view kind, const absl::Status& status) {
    CountRequest(kind, StatusLabel(status.code()));
  }
  // The `status` label for a code: its snake_case name when listed in kRequestStatuses,
  // "internal" for every other code.
  static absl::string_view StatusLabel(absl::StatusCode code);

  // Sets abcd_state_bytes_per_sequence{model=model_name} and returns the observer to put in
  // that model's ExecutorOptions::observer. Owned by this object, valid for its lifetime.
  // Bytes of `model_name` that are not UTF-8 are replaced with '?'.
  ExecutorObserver* AddModel(const std::string& model_name, int64_t state_bytes_per_sequence);

  // Runs every render hook, sums the models' latest stats into the gauges and returns the text
  // exposition (format 0.0.4, Content-Type kContentType) written by prometheus::TextSerializer.
  std::string Render() const;

  // `hook` runs at the start of every Render() (e.g. SessionManager::RefreshMetrics, which
  // sets gauges of metrics registered on registry()); it must be quick and must not call this
  // object. Whatever it refers to must outlive this object or the last Render().
  void AddRenderHook(std::function<void()> hook);

  // For metrics a frontend wants to add beside the contract (names must not clash with it).
  prometheus::Registry& registry() { return *registry_; }

 private:
  class ModelObserver;
  struct Instruments {
    prometheus::Counter* prompt_tokens = nullptr;
    prometheus::Counter* generated_tokens = nullptr;
    prometheus::Histogram* time_to_first_token = nullptr;
    prometheus::Histogram* inter_token_latency = nullptr;
    prometheus::Histogram* request_duration = nullptr;
    prometheus::Histogram* batch_size = nullptr;
  };

  const std::shared_ptr<prometheus::Registry> registry_;
  Instruments instruments_;
  std::array<std::array<prometheus::Counter*, kRequestStatuses.size()>, kRequestKinds.size()>
      requests_{};
  prometheus::Gauge* running_sequences_ = nullptr;
  prometheus::Gauge* waiting_requests_ = nullptr;
  prometheus::Gauge* state_bytes_in_use_ = nullptr;
  prometheus::Gauge* state_bytes_capacity_ = nullptr;
  prometheus::Gauge* kv_cache_bytes_ = nullptr;
  prometheus::Gauge* kv_cache_spare_bytes_ = nullptr;
  prometheus::Family<prometheus::Gauge>* state_bytes_per_sequence_ = nullptr;
  prometheus::Family<prometheus::Gauge>* prefix_cache_bytes_ = nullptr;
  prometheus::Family<prometheus::Gauge>* prefix_cache_entries_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefix_cache_queried_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefix_cache_hits_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefix_cache_evictions_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefix_cache_misses_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefix_cache_lookups_ = nullptr;
  prometheus::Family<prometheus::Counter>* speculative_drafted_ = nullptr;
  prometheus::Family<prometheus::Counter>* speculative_accepted_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefill_overdue_ = nullptr;

  mutable absl::Mutex mu_;  // AddModel/AddRenderHook vs Render; never held by an observer
  std::vector<std::unique_ptr<ModelObserver>> models_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> render_hooks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace abcd
