// json_schema_scalars.h: string and number keywords.
#include "engine/sampling/json_schema_scalars.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

namespace abcd {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr int64_t kMaxLengthBound = 1 << 20;
// Cells of a string's length table (DFA states x lengths) at most.
constexpr int64_t kMaxLiveCells = int64_t{1} << 18;
constexpr int64_t kMaxMagnitude = 999'999'999'999'999;  // 15 digits
constexpr double kClamp = 2e15;

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, what));
}

// live[c * n + s] of JsonNode: whether `s` after `c` characters can still end within
// [min, max] (max < 0: unbounded).
absl::Status FillLive(const JsonDfa& dfa, int min, int max, const std::string& path,
                      std::vector<uint8_t>* live) {
  const int64_t n = dfa.states();
  const int64_t longest = max >= 0 ? max : min + n;  // lengths worth checking (pumping)
  const int64_t rows = max >= 0 ? max : min;         // counts with a row
  if ((longest + 1) * n > kMaxLiveCells) {
    return Invalid(path, absl::StrCat(": minLength/maxLength with format or pattern: at most ",
                                      kMaxLiveCells, " (length x automaton state) cells"));
  }
  // exact[L * n + s]: an accepting state is exactly L characters away from s; count[L * n + s]:
  // how many of exact[0..L) hold.
  std::vector<uint8_t> exact((longest + 1) * n, 0);
  for (int64_t s = 0; s < n; ++s) exact[s] = dfa.accepting[s];
  for (int64_t len = 1; len <= longest; ++len) {
    for (int64_t s = 0; s < n; ++s) {
      for (int c = 0; c < JsonDfa::kChars && !exact[len * n + s]; ++c) {
        const int t = dfa.Next(static_cast<int>(s), static_cast<uint8_t>(c));
        if (t >= 0 && exact[(len - 1) * n + t]) exact[len * n + s] = 1;
      }
    }
  }
  std::vector<int32_t> count((longest + 2) * n, 0);
  for (int64_t len = 0; len <= longest; ++len) {
    for (int64_t s = 0; s < n; ++s) {
      count[(len + 1) * n + s] = count[len * n + s] + exact[len * n + s];
    }
  }
  live->assign((rows + 1) * n, 0);
  for (int64_t c = 0; c <= rows; ++c) {
    const int64_t lo = std::max<int64_t>(0, min - c);
    const int64_t hi = max >= 0 ? max - c : min - c + n;
    for (int64_t s = 0; s < n; ++s) {
      (*live)[c * n + s] = lo <= hi && count[(hi + 1) * n + s] - count[lo * n + s] > 0;
    }
  }
  if (!(*live)[0]) {
    return Invalid(path,
                   ": no string of its format/pattern has a length within "
                   "minLength/maxLength");
  }
  return absl::OkStatus();
}

}  // namespace

bool HasStringKeywords(const OrderedJson& schema) {
  return schema.contains("minLength") || schema.contains("maxLength") ||
         schema.contains("pattern") || schema.contains("format");
}

bool HasNumberKeywords(const OrderedJson& schema) {
  return schema.contains("minimum") || schema.contains("maximum") ||
         schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum");
}

absl::StatusOr<JsonNode> CompileStringNode(const OrderedJson& schema, const std::string& path,
                                           std::vector<JsonDfa>* dfas) {
  JsonNode node;
  node.kind = JsonNode::Kind::kString;
  int max = -1;
  for (const char* bound : {"minLength", "maxLength"}) {
    const auto it = schema.find(bound);
    if (it == schema.end()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > kMaxLengthBound) {
      return Invalid(path,
                     absl::StrCat(".", bound, " must be an integer in [0, ", kMaxLengthBound, "]"));
    }
    if (bound[1] == 'i') {
      node.min_length = it->get<int>();
    } else {
      node.max_length = max = it->get<int>();
    }
  }
  if (max >= 0 && node.min_length > max) return Invalid(path, ".minLength exceeds maxLength");
  std::optional<JsonDfa> dfa;
  if (const auto it = schema.find("format"); it != schema.end()) {
    const std::string pattern = it->is_string() ? FormatPattern(it->get<std::string>()) : "";
    if (pattern.empty()) {
      return Invalid(path, absl::StrCat(".format ", it->dump(),
                                        " is not supported (supported: "
                                        "date-time, date, time, uuid, email, ipv4)"));
    }
    auto compiled = CompilePattern(pattern, path + ".format");
    if (!compiled.ok()) return compiled.status();
    dfa = std::move(*compiled);
  }
  if (const auto it = schema.find("pattern"); it != schema.end()) {
    if (!it->is_string()) return Invalid(path, ".pattern must be a string");
    auto compiled = CompilePattern(it->get<std::string>(), path + ".pattern");
    if (!compiled.ok()) return compiled.status();
    if (dfa.has_value()) {
      compiled = IntersectDfas(*dfa, *compiled, path);
      if (!compiled.ok()) return compiled.status();
    }
    dfa = std::move(*compiled);
  }
  if (dfa.has_value()) {
    if (node.min_length > 0 || max >= 0) {
      absl::Status st = FillLive(*dfa, node.min_length, max, path, &node.live);
      if (!st.ok()) return st;
    }
    node.dfa = static_cast<int>(dfas->size());
    dfas->push_back(std::move(*dfa));
  }
  return node;
}

absl::Status BoundNumber(const OrderedJson& schema, const std::string& path, JsonNode* number) {
  constexpr int64_t kBig = 2'000'000'000'000'000;
  // Values: the integers v a number may be; fractions "q.f": q for "+" and "-" signs.
  int64_t v_lo = -kBig, v_hi = kBig, p_lo = -kBig, p_hi = kBig, n_lo = -kBig, n_hi = kBig;
  bool any = false;
  for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    const auto it = schema.find(bound);
    if (it == schema.end()) continue;
    if (!it->is_number()) return Invalid(path, absl::StrCat(".", bound, " must be a number"));
    any = true;
    const double x = std::clamp(it->get<double>(), -kClamp, kClamp);
    const auto up = static_cast<int64_t>(std::ceil(x));
    const auto down = static_cast<int64_t>(std::floor(x));
    const absl::string_view name = bound;
    if (name == "minimum") {
      v_lo = std::max(v_lo, up);
      p_lo = std::max(p_lo, up);
      n_hi = std::min(n_hi, -up - 1);
    } else if (name == "exclusiveMinimum") {
      v_lo = std::max(v_lo, down + 1);
      p_lo = std::max(p_lo, down + 1);
      n_hi = std::min(n_hi, -up - 1);
    } else if (name == "maximum") {
      v_hi = std::min(v_hi, down);
      p_hi = std::min(p_hi, down - 1);
      n_lo = std::max(n_lo, -down);
    } else {
      v_hi = std::min(v_hi, up - 1);
      p_hi = std::min(p_hi, down - 1);
      n_lo = std::max(n_lo, -up + 1);
    }
  }
  if (!any) return absl::OkStatus();
  auto clip = [](int64_t lo, int64_t hi, int64_t* out_lo, int64_t* out_hi) {
    *out_lo = std::max<int64_t>(lo, 0);
    *out_hi = std::min(hi, kMaxMagnitude);
  };
  number->bounded = true;
  clip(v_lo, v_hi, &number->end_lo[0], &number->end_hi[0]);
  clip(-v_hi, -v_lo, &number->end_lo[1], &number->end_hi[1]);
  clip(p_lo, p_hi, &number->frac_lo[0], &number->frac_hi[0]);
  clip(n_lo, n_hi, &number->frac_lo[1], &number->frac_hi[1]);
  if (number->end_lo[0] > number->end_hi[0] && number->end_lo[1] > number->end_hi[1]) {
    return Invalid(path,
                   ": no integer of at most 15 digits lies within its minimum/maximum "
                   "(bounds that admit only fractions are not supported)");
  }
  return absl::OkStatus();
}

}  // namespace abcd
