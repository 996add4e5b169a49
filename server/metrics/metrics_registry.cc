#include "server/metrics/metrics_registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace abcd {

// ---------------------------------------------------------------------------------------------
// Metric types.

void Counter::Increment(double amount) {
  if (!(amount >= 0.0)) return;  // negative or NaN: a counter never goes down
  value_.fetch_add(amount, std::memory_order_relaxed);
}

void Gauge::Add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    counts_[i].store(0, std::memory_order_relaxed);
  }
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot snapshot;
  snapshot.upper_bounds = upper_bounds_;
  snapshot.cumulative_counts.resize(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

// ---------------------------------------------------------------------------------------------
// Names, escaping, number formatting.

namespace {

bool IsAsciiLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || c == ':' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::StartsWith(name, "__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsAsciiLetter(c) || c == '_' || (i > 0 && IsAsciiDigit(c));
    if (!ok) return false;
  }
  return true;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    size_t length;
    uint32_t code;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return false;
      code = (code << 6) | (byte(i + k) & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kMinForLength[length]) return false;      // overlong
    if (code > 0x10FFFF) return false;                   // beyond Unicode
    if (code >= 0xD800 && code <= 0xDFFF) return false;  // surrogate
    i += length;
  }
  return true;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53
  if (value == std::trunc(value) && std::fabs(value) <= kMaxExactInteger) {
    return absl::StrCat(static_cast<int64_t>(value));  // also turns -0 into "0"
  }
  // Go's strconv.FormatFloat(value, 'g', -1, 64): shortest round-trip digits, exponent form
  // when the decimal exponent is < -4 or >= 6 (e.g. 1.5e-05, 1.2345675e+06), else fixed.
  char buffer[64];
  const auto scientific =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  if (scientific.ec != std::errc()) return "NaN";  // cannot happen: 64 bytes always suffice
  const char* digits = std::find(buffer, scientific.ptr, 'e');
  if (digits != scientific.ptr) ++digits;                    // past 'e'
  if (digits != scientific.ptr && *digits == '+') ++digits;  // from_chars takes no '+'
  int exponent = 0;
  std::from_chars(digits, scientific.ptr, exponent);  // the buffer is not NUL-terminated
  if (exponent < -4 || exponent >= 6) return std::string(buffer, scientific.ptr);
  const auto fixed =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed);
  if (fixed.ec != std::errc()) return "NaN";
  return std::string(buffer, fixed.ptr);
}

std::string EscapeLabelValue(absl::string_view value) {
  return absl::StrReplaceAll(value, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

std::string EscapeHelp(absl::string_view help) {
  return absl::StrReplaceAll(help, {{"\\", "\\\\"}, {"\n", "\\n"}});
}

// ---------------------------------------------------------------------------------------------
// Registry.

struct MetricsRegistry::Metric {
  std::vector<std::string> label_values;  // in the family's label_names order
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
};

struct MetricsRegistry::Family {
  Type type = Type::kCounter;
  std::string name;
  std::string help;
  std::vector<std::string> label_names;  // sorted
  std::vector<double> upper_bounds;      // histograms only
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> metrics;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

namespace {

absl::string_view TypeName(int type) {
  static constexpr absl::string_view kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

// The series names a family of `type` writes (its own name included), used to reject
// families whose samples would be indistinguishable from another family's.
std::vector<std::string> SeriesNames(absl::string_view name, bool histogram) {
  std::vector<std::string> names = {std::string(name)};
  if (histogram) {
    names.push_back(absl::StrCat(name, "_bucket"));
    names.push_back(absl::StrCat(name, "_sum"));
    names.push_back(absl::StrCat(name, "_count"));
  }
  return names;
}

}  // namespace

absl::StatusOr<MetricsRegistry::Metric*> MetricsRegistry::Add(Type type, absl::string_view name,
                                                              absl::string_view help,
                                                              const MetricLabels& labels,
                                                              std::vector<double> bounds) {
  const bool histogram = type == Type::kHistogram;
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid metric name \"", name, "\""));
  }
  if (!IsValidUtf8(help)) {
    return absl::InvalidArgumentError(absl::StrCat("help of ", name, " is not UTF-8"));
  }
  MetricLabels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> label_names;
  std::vector<std::string> label_values;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [label, value] = sorted[i];
    if (!IsValidLabelName(label) || (histogram && label == "le")) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid label name \"", label, "\" on ", name));
    }
    if (i > 0 && sorted[i - 1].first == label) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate label ", label, " on ", name));
    }
    if (!IsValidUtf8(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("value of label ", label, " on ", name, " is not UTF-8"));
    }
    label_names.push_back(label);
    label_values.push_back(value);
  }
  if (histogram) {
    if (!bounds.empty() && bounds.back() == HUGE_VAL) bounds.pop_back();
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) {
        return absl::InvalidArgumentError(
            absl::StrCat("histogram ", name, " needs finite, strictly increasing bucket bounds"));
      }
    }
  }

  absl::MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    const std::vector<std::string> mine = SeriesNames(name, histogram);
    for (const auto& [other_name, other] : families_) {
      for (const std::string& theirs : SeriesNames(other_name, other->type == Type::kHistogram)) {
        if (std::find(mine.begin(), mine.end(), theirs) != mine.end()) {
          return absl::AlreadyExistsError(absl::StrCat("metric ", name, " collides with ",
                                                       TypeName(static_cast<int>(other->type)), " ",
                                                       other_name));
        }
      }
    }
    auto family = std::make_unique<Family>();
    family->type = type;
    family->name = std::string(name);
    family->help = std::string(help);
    family->label_names = label_names;
    family->upper_bounds = bounds;
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  Family& family = *it->second;
  if (family.type != type) {
    return absl::AlreadyExistsError(absl::StrCat("metric ", name, " is already registered as a ",
                                                 TypeName(static_cast<int>(family.type))));
  }
  if (family.help != help) {
    return absl::AlreadyExistsError(
        absl::StrCat("metric ", name, " is already registered with another help text"));
  }
  if (family.label_names != label_names) {
    return absl::AlreadyExistsError(absl::StrCat("metric ", name,
                                                 " is already registered with labels {",
                                                 absl::StrJoin(family.label_names, ","), "}"));
  }
  if (histogram && family.upper_bounds != bounds) {
    return absl::AlreadyExistsError(
        absl::StrCat("histogram ", name, " is already registered with other buckets"));
  }
  std::unique_ptr<Metric>& metric = family.metrics[label_values];
  if (metric == nullptr) {
    metric = std::make_unique<Metric>();
    metric->label_values = std::move(label_values);
    switch (type) {
      case Type::kCounter:
        metric->counter = std::make_unique<Counter>();
        break;
      case Type::kGauge:
        metric->gauge = std::make_unique<Gauge>();
        break;
      case Type::kHistogram:
        metric->histogram = std::make_unique<Histogram>(std::move(bounds));
        break;
    }
  }
  return metric.get();
}

absl::StatusOr<Counter*> MetricsRegistry::AddCounter(absl::string_view name, absl::string_view help,
                                                     const MetricLabels& labels) {
  absl::StatusOr<Metric*> metric = Add(Type::kCounter, name, help, labels, {});
  if (!metric.ok()) return metric.status();
  return (*metric)->counter.get();
}

absl::StatusOr<Gauge*> MetricsRegistry::AddGauge(absl::string_view name, absl::string_view help,
                                                 const MetricLabels& labels) {
  absl::StatusOr<Metric*> metric = Add(Type::kGauge, name, help, labels, {});
  if (!metric.ok()) return metric.status();
  return (*metric)->gauge.get();
}

absl::StatusOr<Histogram*> MetricsRegistry::AddHistogram(absl::string_view name,
                                                         absl::string_view help,
                                                         std::vector<double> upper_bounds,
                                                         const MetricLabels& labels) {
  absl::StatusOr<Metric*> metric =
      Add(Type::kHistogram, name, help, labels, std::move(upper_bounds));
  if (!metric.ok()) return metric.status();
  return (*metric)->histogram.get();
}

namespace {

// `a="x",b="y"` (no braces); empty without labels.
std::string LabelPairs(const std::vector<std::string>& names,
                       const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, i > 0 ? "," : "", names[i], "=\"", EscapeLabelValue(values[i]), "\"");
  }
  return out;
}

void AppendSample(std::string* out, absl::string_view name, absl::string_view labels,
                  absl::string_view value) {
  if (labels.empty()) {
    absl::StrAppend(out, name, " ", value, "\n");
  } else {
    absl::StrAppend(out, name, "{", labels, "} ", value, "\n");
  }
}

}  // namespace

std::string MetricsRegistry::Serialize() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) {
    if (family->help.empty()) {
      absl::StrAppend(&out, "# HELP ", name, "\n");
    } else {
      absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family->help), "\n");
    }
    absl::StrAppend(&out, "# TYPE ", name, " ", TypeName(static_cast<int>(family->type)), "\n");
    for (const auto& [values, metric] : family->metrics) {
      const std::string labels = LabelPairs(family->label_names, values);
      switch (family->type) {
        case Type::kCounter:
          AppendSample(&out, name, labels, FormatMetricValue(metric->counter->Value()));
          break;
        case Type::kGauge:
          AppendSample(&out, name, labels, FormatMetricValue(metric->gauge->Value()));
          break;
        case Type::kHistogram: {
          const Histogram::Snapshot snapshot = metric->histogram->Collect();
          const std::string bucket_name = absl::StrCat(name, "_bucket");
          const absl::string_view separator = labels.empty() ? "" : ",";
          for (size_t i = 0; i < snapshot.cumulative_counts.size(); ++i) {
            const std::string le = i < snapshot.upper_bounds.size()
                                       ? FormatMetricValue(snapshot.upper_bounds[i])
                                       : std::string("+Inf");
            AppendSample(&out, bucket_name, absl::StrCat(labels, separator, "le=\"", le, "\""),
                         absl::StrCat(snapshot.cumulative_counts[i]));
          }
          AppendSample(&out, absl::StrCat(name, "_sum"), labels, FormatMetricValue(snapshot.sum));
          AppendSample(&out, absl::StrCat(name, "_count"), labels, absl::StrCat(snapshot.count));
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace abcd
