#include "server/sessions/session_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace abcd {
namespace {

absl::Status CheckOptions(const SessionStoreOptions& options) {
  if (options.budget_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("session store budget_bytes must be positive, got ", options.budget_bytes));
  }
  const struct {
    const char* name;
    absl::Duration value;
  } durations[] = {{"ttl", options.ttl},
                   {"lock_ttl", options.lock_ttl},
                   {"timeout", options.timeout},
                   {"breaker", options.breaker}};
  for (const auto& d : durations) {
    if (d.value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "session store ", d.name, " must be positive, got ", absl::FormatDuration(d.value)));
    }
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session store max_connections must be at least 1, got ", options.max_connections));
  }
  return absl::OkStatus();
}

absl::Status BadSpec(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--session_store \"", spec, "\": ", why,
                   " (expected \"memory\" or \"redis://HOST:PORT[/DB]\")"));
}

}  // namespace

absl::Status SessionInUseError(absl::string_view id) {
  return absl::AbortedError(absl::StrCat("session ", id, " is in use by another request"));
}

absl::StatusOr<RedisAddress> ParseRedisUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "redis://")) return BadSpec(url, "unknown store");
  RedisAddress address;
  absl::string_view db;
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (db.empty() || !absl::SimpleAtoi(db, &address.db) || address.db < 0 ||
        db.find_first_not_of("0123456789") != absl::string_view::npos) {
      return BadSpec(url, "DB must be a non-negative integer");
    }
  }
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos) return BadSpec(url, "missing :PORT");
  absl::string_view host = rest.substr(0, colon);
  absl::string_view port = rest.substr(colon + 1);
  if (absl::ConsumePrefix(&host, "[")) {  // [::1]:6379
    if (!absl::ConsumeSuffix(&host, "]")) return BadSpec(url, "unterminated [IPv6 address]");
  }
  if (host.empty()) return BadSpec(url, "missing HOST");
  if (host.find_first_of("@/?#[] ") != absl::string_view::npos) {
    return BadSpec(url, "HOST must be a host name or address (no user, password or query)");
  }
  if (port.empty() || port.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(port, &address.port) || address.port < 1 || address.port > 65535) {
    return BadSpec(url, "PORT must be 1..65535");
  }
  address.host = std::string(host);
  return address;
}

absl::StatusOr<std::unique_ptr<SessionStore>> CreateSessionStore(
    absl::string_view spec, const SessionStoreOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  if (spec == "memory") return NewMemorySessionStore(options);
  absl::StatusOr<RedisAddress> address = ParseRedisUrl(spec);
  if (!address.ok()) return address.status();
  return NewRedisSessionStore(std::string(spec), *std::move(address), options);
}

}  // namespace abcd
