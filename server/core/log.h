// One line per server event on stderr: `2026-11-22T10:00:00.123Z event=started key=value ...`.
// Values with spaces are quoted. Thread-safe (one write per line).
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace abcd {

void LogEvent(absl::string_view event,
              std::initializer_list<std::pair<absl::string_view, std::string>> fields = {});

}  // namespace abcd
