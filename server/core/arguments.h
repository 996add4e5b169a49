// Minimal command-line parsing for abcd binaries: a subcommand (or none) followed by `--name
// value`,
// `--name=value` or boolean `--name` options. Unknown options are errors naming the option.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace abcd {

class Arguments {
 public:
  // `flags` are options without a value; every other allowed option takes one.
  static absl::StatusOr<Arguments> Parse(const std::vector<std::string>& args,
                                         const std::set<std::string>& valued,
                                         const std::set<std::string>& flags);

  bool Has(const std::string& name) const { return values_.contains(name); }
  // Sets `name` unless the command line already did (config-file values).
  void SetDefault(const std::string& name, const std::string& value) {
    values_.try_emplace(name, value);
  }
  std::string String(const std::string& name, const std::string& fallback) const;
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback) const;
  absl::StatusOr<double> Double(const std::string& name, double fallback) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace abcd
