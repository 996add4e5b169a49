#include "loadtest/lib/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace abcd::loadtest {
namespace {

bool ParseValue(absl::string_view text, double* value) {
  if (text == "+Inf" || text == "Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    *value = NAN;
    return true;
  }
  return absl::SimpleAtod(text, value);
}

// Parses `{a="x",b="y\"z"}` starting at line[*pos] == '{'; leaves *pos after the '}'.
bool ParseLabels(absl::string_view line, size_t* pos, std::map<std::string, std::string>* out) {
  size_t i = *pos + 1;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
    if (i < line.size() && line[i] == '}') {
      *pos = i + 1;
      return true;
    }
    const size_t eq = line.find('=', i);
    if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
    const std::string key(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
    std::string value;
    size_t j = eq + 2;
    bool closed = false;
    for (; j < line.size(); ++j) {
      const char c = line[j];
      if (c == '\\' && j + 1 < line.size()) {
        const char n = line[++j];
        value.push_back(n == 'n' ? '\n' : n);
      } else if (c == '"') {
        closed = true;
        break;
      } else {
        value.push_back(c);
      }
    }
    if (!closed) return false;
    (*out)[key] = std::move(value);
    i = j + 1;
  }
  return false;
}

}  // namespace

std::vector<Sample> ParsePrometheusText(absl::string_view text) {
  std::vector<Sample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    Sample sample;
    size_t pos = 0;
    while (pos < line.size() && line[pos] != '{' && line[pos] != ' ') ++pos;
    sample.name = std::string(line.substr(0, pos));
    if (sample.name.empty()) continue;
    if (pos < line.size() && line[pos] == '{' && !ParseLabels(line, &pos, &sample.labels)) {
      continue;
    }
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(pos));
    const size_t space = rest.find(' ');
    if (!ParseValue(rest.substr(0, space), &sample.value)) continue;
    samples.push_back(std::move(sample));
  }
  return samples;
}

MetricSnapshot::MetricSnapshot(std::vector<Sample> samples) : samples_(std::move(samples)) {
  for (size_t i = 0; i < samples_.size(); ++i) by_name_.emplace(samples_[i].name, i);
}

bool MetricSnapshot::Has(const std::string& name) const { return by_name_.contains(name); }

double MetricSnapshot::Sum(const std::string& name,
                           const std::map<std::string, std::string>& labels) const {
  double sum = 0;
  auto [begin, end] = by_name_.equal_range(name);
  for (auto it = begin; it != end; ++it) {
    const Sample& s = samples_[it->second];
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto found = s.labels.find(key);
      if (found == s.labels.end() || found->second != value) {
        match = false;
        break;
      }
    }
    if (match) sum += s.value;
  }
  return sum;
}

}  // namespace abcd::loadtest
