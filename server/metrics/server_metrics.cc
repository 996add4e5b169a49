#include "server/metrics/server_metrics.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "server/core/utf8.h"

namespace abcd {
namespace {

// 1 ms .. 60 s: time to first token, inter-token latency and request duration.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};
}

prometheus::Counter* AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge* AddGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Histogram* AddHistogram(prometheus::Registry& registry, const std::string& name,
                                    const std::string& help,
                                    const prometheus::Histogram::BucketBoundaries& buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

prometheus::Histogram::BucketBoundaries BatchSizeBuckets() {
  prometheus::Histogram::BucketBoundaries buckets;
  for (int size = 1; size <= 1024; size *= 2) buckets.push_back(size);
  return buckets;
}

template <size_t N>
size_t IndexOr(const std::array<absl::string_view, N>& names, absl::string_view name,
               size_t fallback) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return i;
  }
  return fallback;
}

std::string Utf8OrQuestionMarks(const std::string& text) {
  if (IsValidUtf8(text)) return text;
  std::string out = text;
  for (char& c : out) {
    if (static_cast<unsigned char>(c) >= 0x80) c = '?';
  }
  return out;
}

}  // namespace

// Keeps the latest ExecutorStats of one model in atomics and feeds the shared instruments.
// Runs on that model's engine thread; takes no lock of ours (a histogram observation takes
// prometheus-cpp's short per-histogram lock).
class ServerMetrics::ModelObserver : public ExecutorObserver {
 public:
  explicit ModelObserver(const Instruments& instruments) : instruments_(instruments) {}

  void OnIteration(int64_t batch_size, const ExecutorStats& stats) override {
    running_sequences_.store(stats.running_sequences, std::memory_order_relaxed);
    waiting_requests_.store(stats.waiting_requests, std::memory_order_relaxed);
    state_bytes_in_use_.store(stats.state_bytes_in_use, std::memory_order_relaxed);
    state_bytes_capacity_.store(stats.state_bytes_capacity, std::memory_order_relaxed);
    kv_cache_bytes_.store(stats.kv_cache_bytes, std::memory_order_relaxed);
    kv_cache_spare_bytes_.store(stats.kv_cache_spare_bytes, std::memory_order_relaxed);
    prefix_cache_bytes_.store(stats.prefix_cache_bytes, std::memory_order_relaxed);
    prefix_cache_entries_.store(stats.prefix_cache_entries, std::memory_order_relaxed);
    prefix_cache_queried_.store(stats.prefix_cache_queried_tokens, std::memory_order_relaxed);
    prefix_cache_hits_.store(stats.prefix_cache_hit_tokens, std::memory_order_relaxed);
    prefix_cache_evictions_.store(stats.prefix_cache_evictions, std::memory_order_relaxed);
    const PrefixCacheCounters& counters = stats.prefix_cache_counters;
    const int64_t misses[kMissReasons] = {
        counters.miss_evicted_tokens, counters.miss_not_cached_tokens, counters.miss_last_tokens};
    for (int i = 0; i < kMissReasons; ++i) {
      prefix_cache_misses_[i].store(misses[i], std::memory_order_relaxed);
    }
    for (int i = 0; i < PrefixCacheCounters::kOutcomes; ++i) {
      prefix_cache_lookups_[i].store(counters.lookups[i], std::memory_order_relaxed);
    }
    if (batch_size > 0) instruments_.batch_size->Observe(static_cast<double>(batch_size));
  }
  void OnFirstToken(double seconds_since_enqueue) override {
    instruments_.time_to_first_token->Observe(seconds_since_enqueue);
  }
  void OnToken(double seconds_since_previous_token) override {
    instruments_.inter_token_latency->Observe(seconds_since_previous_token);
  }
  void OnTokensGenerated(int tokens) override {
    if (tokens > 0) instruments_.generated_tokens->Increment(tokens);
  }
  void OnRequestFinished(const absl::Status& status, int prompt_tokens, int completion_tokens,
                         double seconds) override {
    if (prompt_tokens > 0) instruments_.prompt_tokens->Increment(prompt_tokens);
    instruments_.request_duration->Observe(seconds);
  }
  void OnSpeculation(int drafted, int accepted) override {
    if (speculative_drafted == nullptr) return;
    if (drafted > 0) speculative_drafted->Increment(drafted);
    if (accepted > 0) speculative_accepted->Increment(accepted);
  }
  void OnOverduePrefill() override {
    if (prefill_overdue != nullptr) prefill_overdue->Increment();
  }
  // This model's speculative decoding counters (labelled with its name), set by AddModel before
  // the model's engine runs.
  prometheus::Counter* speculative_drafted = nullptr;
  prometheus::Counter* speculative_accepted = nullptr;
  // Iterations widened for overdue prompts (labelled with the model's name), set by AddModel.
  prometheus::Counter* prefill_overdue = nullptr;

  struct Totals {
    int64_t running_sequences = 0;
    int64_t waiting_requests = 0;
    int64_t state_bytes_in_use = 0;
    int64_t state_bytes_capacity = 0;
    int64_t kv_cache_bytes = 0;
    int64_t kv_cache_spare_bytes = 0;
  };
  void AddTo(Totals& totals) const {
    totals.running_sequences += running_sequences_.load(std::memory_order_relaxed);
    totals.waiting_requests += waiting_requests_.load(std::memory_order_relaxed);
    totals.state_bytes_in_use += state_bytes_in_use_.load(std::memory_order_relaxed);
    totals.state_bytes_capacity += state_bytes_capacity_.load(std::memory_order_relaxed);
    totals.kv_cache_bytes += kv_cache_bytes_.load(std::memory_order_relaxed);
    totals.kv_cache_spare_bytes += kv_cache_spare_bytes_.load(std::memory_order_relaxed);
  }

  static constexpr int kMissReasons = 3;
  static constexpr const char* kMissReasonNames[kMissReasons] = {"evicted", "not_cached",
                                                                 "last_token"};

  // This model's prefix-cache series (labelled with its name), set by Render under mu_.
  struct PrefixCacheSeries {
    prometheus::Gauge* bytes = nullptr;
    prometheus::Gauge* entries = nullptr;
    prometheus::Counter* queried = nullptr;
    prometheus::Counter* hits = nullptr;
    prometheus::Counter* evictions = nullptr;
    std::array<prometheus::Counter*, kMissReasons> misses{};
    std::array<prometheus::Counter*, PrefixCacheCounters::kOutcomes> lookups{};
  };

  PrefixCacheSeries prefix_cache;
  void UpdatePrefixCache() const {
    if (prefix_cache.bytes == nullptr) return;
    prefix_cache.bytes->Set(static_cast<double>(prefix_cache_bytes_.load()));
    prefix_cache.entries->Set(static_cast<double>(prefix_cache_entries_.load()));
    Advance(prefix_cache.queried, prefix_cache_queried_.load());
    Advance(prefix_cache.hits, prefix_cache_hits_.load());
    Advance(prefix_cache.evictions, prefix_cache_evictions_.load());
    for (int i = 0; i < kMissReasons; ++i) {
      Advance(prefix_cache.misses[i], prefix_cache_misses_[i].load());
    }
    for (int i = 0; i < PrefixCacheCounters::kOutcomes; ++i) {
      Advance(prefix_cache.lookups[i], prefix_cache_lookups_[i].load());
    }
  }

 private:
  const Instruments instruments_;
  std::atomic<int64_t> running_sequences_{0};
  std::atomic<int64_t> waiting_requests_{0};
  std::atomic<int64_t> state_bytes_in_use_{0};
  std::atomic<int64_t> state_bytes_capacity_{0};
  std::atomic<int64_t> kv_cache_bytes_{0};
  std::atomic<int64_t> kv_cache_spare_bytes_{0};
  std::atomic<int64_t> prefix_cache_bytes_{0};
  std::atomic<int64_t> prefix_cache_entries_{0};
  std::atomic<int64_t> prefix_cache_queried_{0};
  std::atomic<int64_t> prefix_cache_hits_{0};
  std::atomic<int64_t> prefix_cache_evictions_{0};
  std::array<std::atomic<int64_t>, kMissReasons> prefix_cache_misses_{};
  std::array<std::atomic<int64_t>, PrefixCacheCounters::kOutcomes> prefix_cache_lookups_{};

  // A counter follows a cumulative figure: it only ever moves up.
  static void Advance(prometheus::Counter* counter, int64_t total) {
    const double delta = static_cast<double>(total) - counter->Value();
    if (delta > 0) counter->Increment(delta);
  }
};

ServerMetrics::ServerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& registry = *registry_;
  auto& requests = prometheus::BuildCounter()
                       .Name("abcd_requests_total")
                       .Help("Requests answered, by request kind and final status.")
                       .Register(registry);
  for (size_t k = 0; k < kRequestKinds.size(); ++k) {
    for (size_t s = 0; s < kRequestStatuses.size(); ++s) {
      requests_[k][s] = &requests.Add(
          {{"kind", std::string(kRequestKinds[k])}, {"status", std::string(kRequestStatuses[s])}});
    }
  }
  instruments_.prompt_tokens = AddCounter(registry, "abcd_prompt_tokens_total",
                                          "Prompt tokens processed by the engines (prefilled).");
  instruments_.generated_tokens =
      AddCounter(registry, "abcd_generated_tokens_total", "Tokens generated by the engines.");
  instruments_.time_to_first_token = AddHistogram(
      registry, "abcd_time_to_first_token_seconds",
      "Seconds from a request's enqueue to its first generated token.", LatencyBuckets());
  instruments_.inter_token_latency =
      AddHistogram(registry, "abcd_inter_token_latency_seconds",
                   "Seconds between consecutive generated tokens of a request.", LatencyBuckets());
  instruments_.request_duration = AddHistogram(
      registry, "abcd_request_duration_seconds",
      "Seconds from a request's enqueue to its final event in the engine.", LatencyBuckets());
  instruments_.batch_size = AddHistogram(registry, "abcd_batch_size",
                                         "Sequences decoded together in one engine iteration "
                                         "(iterations with an empty batch are not observed).",
                                         BatchSizeBuckets());
  running_sequences_ = AddGauge(registry, "abcd_running_sequences",
                                "Sequences being decoded, summed over all served models.");
  waiting_requests_ = AddGauge(registry, "abcd_waiting_requests",
                               "Requests queued for admission, summed over all served models.");
  state_bytes_in_use_ =
      AddGauge(registry, "abcd_state_bytes_in_use",
               "Bytes of attention state held by sequences, summed over all served models.");
  state_bytes_capacity_ =
      AddGauge(registry, "abcd_state_bytes_capacity",
               "Attention state budget in bytes, summed over all served models.");
  kv_cache_bytes_ = AddGauge(registry, "abcd_kv_cache_bytes",
                             "Bytes of softmax-layer KV cache (part of abcd_state_bytes_in_use), "
                             "summed over all served models.");
  kv_cache_spare_bytes_ =
      AddGauge(registry, "abcd_kv_cache_spare_bytes",
               "Bytes of released sequences' KV cache storage kept for the next sequences (not "
               "in abcd_state_bytes_in_use; the two together stay within the capacity), summed "
               "over all served models.");
  state_bytes_per_sequence_ =
      &prometheus::BuildGauge()
           .Name("abcd_state_bytes_per_sequence")
           .Help(
               "Fixed attention state bytes of one sequence, per served model (softmax layers "
               "add KV cache per token on top).")
           .Register(registry);
  prefix_cache_bytes_ = &prometheus::BuildGauge()
                             .Name("abcd_prefix_cache_bytes")
                             .Help("Bytes of state snapshots held by the prefix cache, per model.")
                             .Register(registry);
  prefix_cache_entries_ = &prometheus::BuildGauge()
                               .Name("abcd_prefix_cache_entries")
                               .Help("State snapshots held by the prefix cache, per model.")
                               .Register(registry);
  prefix_cache_queried_ = &prometheus::BuildCounter()
                               .Name("abcd_prefix_cache_queried_tokens_total")
                               .Help("Prompt tokens looked up in the prefix cache, per model.")
                               .Register(registry);
  prefix_cache_hits_ =
      &prometheus::BuildCounter()
           .Name("abcd_prefix_cache_hit_tokens_total")
           .Help("Prompt tokens restored from the prefix cache instead of prefilled, per model.")
           .Register(registry);
  prefix_cache_evictions_ = &prometheus::BuildCounter()
                                 .Name("abcd_prefix_cache_evictions_total")
                                 .Help("Prefix cache snapshots evicted for space, per model.")
                                 .Register(registry);
  prefix_cache_misses_ =
      &prometheus::BuildCounter()
           .Name("abcd_prefix_cache_miss_tokens_total")
           .Help(
               "Prompt tokens of cache lookups that were prefilled, per model and reason: "
               "evicted (an evicted snapshot had covered them), not_cached (no snapshot did), "
               "last_token (always prefilled).")
           .Register(registry);
  prefix_cache_lookups_ = &prometheus::BuildCounter()
                               .Name("abcd_prefix_cache_lookups_total")
                               .Help(
                                   "Prefix cache lookups of admitted requests, per model and "
                                   "outcome: hit (all but the last token restored), partial, "
                                   "evicted (none; an evicted snapshot had covered some), "
                                   "miss.")
                               .Register(registry);
  speculative_drafted_ = &prometheus::BuildCounter()
                              .Name("abcd_speculative_draft_tokens_total")
                              .Help("Draft tokens verified by speculative decoding, per model.")
                              .Register(registry);
  speculative_accepted_ =
      &prometheus::BuildCounter()
           .Name("abcd_speculative_accepted_tokens_total")
           .Help(
               "Draft tokens speculative decoding kept (the sampler returned them), per model; "
               "over abcd_speculative_draft_tokens_total: the acceptance rate.")
           .Register(registry);
  prefill_overdue_ =
      &prometheus::BuildCounter()
           .Name("abcd_prefill_overdue_iterations_total")
           .Help(
               "Engine iterations whose prompt tokens were raised above the time policy's share "
               "for prompts waiting longer than --prefill_deadline_ms, per model (each may be an "
               "inter-token latency spike for the running streams).")
           .Register(registry);
}

ServerMetrics::~ServerMetrics() = default;

absl::string_view ServerMetrics::StatusLabel(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "ok";
    case absl::StatusCode::kInvalidArgument:
      return "invalid_argument";
    case absl::StatusCode::kResourceExhausted:
      return "resource_exhausted";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kNotFound:
      return "not_found";
    case absl::StatusCode::kAborted:
      return "aborted";
    case absl::StatusCode::kFailedPrecondition:
      return "failed_precondition";
    default:
      return "internal";
  }
}

void ServerMetrics::CountRequest(absl::string_view kind, absl::string_view status) {
  const size_t k = IndexOr(kRequestKinds, kind, kRequestKinds.size() - 1);          // other
  const size_t s = IndexOr(kRequestStatuses, status, kRequestStatuses.size() - 1);  // internal
  requests_[k][s]->Increment();
}

ExecutorObserver* ServerMetrics::AddModel(const std::string& model_name,
                                          int64_t state_bytes_per_sequence) {
  absl::MutexLock lock(&mu_);
  const prometheus::Labels labels = {{"model", Utf8OrQuestionMarks(model_name)}};
  state_bytes_per_sequence_->Add(labels).Set(static_cast<double>(state_bytes_per_sequence));
  models_.push_back(std::make_unique<ModelObserver>(instruments_));
  models_.back()->speculative_drafted = &speculative_drafted_->Add(labels);
  models_.back()->speculative_accepted = &speculative_accepted_->Add(labels);
  models_.back()->prefill_overdue = &prefill_overdue_->Add(labels);
  ModelObserver::PrefixCacheSeries& series = models_.back()->prefix_cache;
  series.bytes = &prefix_cache_bytes_->Add(labels);
  series.entries = &prefix_cache_entries_->Add(labels);
  series.queried = &prefix_cache_queried_->Add(labels);
  series.hits = &prefix_cache_hits_->Add(labels);
  series.evictions = &prefix_cache_evictions_->Add(labels);
  for (int i = 0; i < ModelObserver::kMissReasons; ++i) {
    prometheus::Labels reason = labels;
    reason["reason"] = ModelObserver::kMissReasonNames[i];
    series.misses[i] = &prefix_cache_misses_->Add(reason);
  }
  for (int i = 0; i < PrefixCacheCounters::kOutcomes; ++i) {
    prometheus::Labels outcome = labels;
    outcome["outcome"] = PrefixCacheCounters::OutcomeName(i);
    series.lookups[i] = &prefix_cache_lookups_->Add(outcome);
  }
  return models_.back().get();
}

void ServerMetrics::AddRenderHook(std::function<void()> hook) {
  absl::MutexLock lock(&mu_);
  render_hooks_.push_back(std::move(hook));
}

std::string ServerMetrics::Render() const {
  ModelObserver::Totals totals;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& hook : render_hooks_) hook();
    for (const auto& model : models_) {
      model->AddTo(totals);
      model->UpdatePrefixCache();
    }
  }
  running_sequences_->Set(static_cast<double>(totals.running_sequences));
  waiting_requests_->Set(static_cast<double>(totals.waiting_requests));
  state_bytes_in_use_->Set(static_cast<double>(totals.state_bytes_in_use));
  state_bytes_capacity_->Set(static_cast<double>(totals.state_bytes_capacity));
  kv_cache_bytes_->Set(static_cast<double>(totals.kv_cache_bytes));
  kv_cache_spare_bytes_->Set(static_cast<double>(totals.kv_cache_spare_bytes));
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace abcd
