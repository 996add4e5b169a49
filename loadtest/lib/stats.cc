#include "loadtest/lib/stats.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace abcd::loadtest {

double Milliseconds(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double Percentile(const std::vector<double>& sorted, double p) {
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

Distribution Describe(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = values.size();
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double squares = 0;
  for (double v : values) squares += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(squares / static_cast<double>(values.size()));
  d.median = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  return d;
}

absl::StatusOr<Slo> ParseSlo(const std::string& text) {
  Slo slo;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, ':');
    double value = 0;
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(kv.second), &value) || !(value >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: \"", part, "\" must be NAME:MILLISECONDS with a value >= 0"));
    }
    if (key == "ttft") {
      slo.ttft_ms = value;
    } else if (key == "tpot") {
      slo.tpot_ms = value;
    } else if (key == "e2el") {
      slo.e2el_ms = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--goodput: unknown metric \"", key, "\" (ttft, tpot or e2el)"));
    }
  }
  return slo;
}

BenchmarkMetrics ComputeMetrics(const std::vector<RequestRecord>& records, Clock::time_point start,
                                Clock::time_point end, const Slo& slo) {
  BenchmarkMetrics m;
  m.duration_s = std::chrono::duration<double>(end - start).count();
  std::vector<double> ttfts, tpots, itls, e2els, queues;
  int64_t good = 0;
  // Output tokens per one-second bucket, and arrival/departure events for peak concurrency.
  std::vector<double> per_second(static_cast<size_t>(std::max(0.0, std::ceil(m.duration_s))) + 1);
  std::vector<std::pair<Clock::time_point, int>> events;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++m.failed;
      ++m.errors_by_status[r.status];
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    const Clock::time_point first = r.chunk_times.empty() ? r.end : r.chunk_times.front();
    const double ttft = Milliseconds(first - r.send);
    const double e2el = Milliseconds(r.end - r.send);
    double tpot = 0;
    if (r.output_tokens > 1 && r.chunk_times.size() > 1) {
      tpot = (e2el - ttft) / (r.output_tokens - 1);
      tpots.push_back(tpot);
    }
    for (size_t i = 1; i < r.chunk_times.size(); ++i) {
      itls.push_back(Milliseconds(r.chunk_times[i] - r.chunk_times[i - 1]));
    }
    ttfts.push_back(ttft);
    e2els.push_back(e2el);
    queues.push_back(Milliseconds(r.send - r.arrival));
    if (!slo.empty() && (!slo.ttft_ms || ttft <= *slo.ttft_ms) &&
        (!slo.tpot_ms || tpot <= *slo.tpot_ms) && (!slo.e2el_ms || e2el <= *slo.e2el_ms)) {
      ++good;
    }
    // Tokens without chunk times (non-streaming answers) land at the end of the request.
    for (size_t i = 0; i < r.chunk_times.size(); ++i) {
      const double at = std::chrono::duration<double>(r.chunk_times[i] - start).count();
      const int tokens = i < r.chunk_tokens.size() ? r.chunk_tokens[i] : 1;
      if (at >= 0 && static_cast<size_t>(at) < per_second.size()) {
        per_second[static_cast<size_t>(at)] += tokens;
      }
    }
    if (r.chunk_times.empty()) {
      const double at = std::chrono::duration<double>(r.end - start).count();
      if (at >= 0 && static_cast<size_t>(at) < per_second.size()) {
        per_second[static_cast<size_t>(at)] += r.output_tokens;
      }
    }
    events.emplace_back(r.send, 1);
    events.emplace_back(r.end, -1);
  }
  if (m.duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / m.duration_s;
    m.request_goodput = static_cast<double>(good) / m.duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / m.duration_s;
    m.total_token_throughput =
        static_cast<double>(m.total_input_tokens + m.total_output_tokens) / m.duration_s;
  }
  for (double v : per_second) m.max_output_tokens_per_s = std::max(m.max_output_tokens_per_s, v);
  // Half-open intervals [send, end): at equal times a departure comes before an arrival.
  std::sort(events.begin(), events.end());
  int64_t current = 0;
  for (const auto& [at, delta] : events) {
    current += delta;
    m.max_concurrent_requests = std::max(m.max_concurrent_requests, current);
  }
  m.ttft_ms = Describe(std::move(ttfts));
  m.tpot_ms = Describe(std::move(tpots));
  m.itl_ms = Describe(std::move(itls));
  m.e2el_ms = Describe(std::move(e2els));
  m.queue_ms = Describe(std::move(queues));
  return m;
}

}  // namespace abcd::loadtest
