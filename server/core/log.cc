#include "server/core/log.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace abcd {

void LogEvent(absl::string_view event,
              std::initializer_list<std::pair<absl::string_view, std::string>> fields) {
  std::string line = absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " event=", event);
  for (const auto& [key, value] : fields) {
    const bool quote = value.empty() || value.find_first_of(" \"=") != std::string::npos;
    absl::StrAppend(&line, " ", key, "=", quote ? "\"" : "", value, quote ? "\"" : "");
  }
  line += "\n";
  // A single write keeps concurrent lines whole.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace abcd
