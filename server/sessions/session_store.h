// Where session blobs live, keyed by session id: an in-memory store (byte budget, LRU eviction,
// TTL) and a Redis store (TTL as Redis expiry, an in-use lock shared by every replica).
//
// A session blob is the engine's saved decoding state; the store treats it as opaque bytes.
// Errors: NOT_FOUND (absent or expired), ABORTED (Lock: held elsewhere), RESOURCE_EXHAUSTED
// (memory: a blob bigger than the whole budget), UNAVAILABLE naming the store (Redis down or
// failing), INVALID_ARGUMENT naming "--session_store" (CreateSessionStore: malformed spec).
// No method crashes or blocks for long on a store failure.
//
// Thread-safety: every method of every SessionStore may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace abcd {

struct SessionStoreOptions {
  int64_t budget_bytes = int64_t{1} << 30;           // memory store: LRU eviction beyond this
  absl::Duration ttl = absl::Hours(24);              // both: a session unused this long is gone
  absl::Duration lock_ttl = absl::Minutes(30);       // redis: an in-use mark expires (crash)
  absl::Duration timeout = absl::Milliseconds(500);  // redis: connect / command timeout
  // redis: after a connection failure every call fails fast with UNAVAILABLE for this long
  // before one call tries to reconnect (a circuit breaker, so callers cannot pile up behind
  // timeouts while Redis is down).
  absl::Duration breaker = absl::Seconds(1);
  // redis: at most this many connections (each used by one call at a time); a call that finds
  // all of them busy waits up to `timeout` for one.
  int max_connections = 4;
  // memory store only: the clock for last_used and TTL (null: absl::Now). For tests.
  std::function<absl::Time()> clock;
};

struct StoredSession {
  std::string blob;
  absl::Time last_used;  // refreshed by Put; Get does not refresh it
};

// sessions/bytes are -1 where the store does not know them cheaply (redis).
struct SessionStoreStats {
  int64_t sessions = 0;
  int64_t bytes = 0;
  int64_t evictions = 0;
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;
  // "memory" or the redis URL as given.
  virtual std::string name() const = 0;
  virtual absl::StatusOr<StoredSession> Get(absl::string_view id) = 0;
  // Inserts or replaces, and refreshes last_used and the TTL.
  virtual absl::Status Put(absl::string_view id, std::string blob) = 0;
  // NOT_FOUND if absent.
  virtual absl::Status Delete(absl::string_view id) = 0;
  // Exclusive use of one id across everything sharing the store (redis: SET NX PX lock_ttl on a
  // separate lock key, so two replicas cannot run the same session at once). ABORTED
  // "session <id> is in use by another request" when already held. The id need not exist.
  virtual absl::Status Lock(absl::string_view id) = 0;
  // Best effort; releases only a lock this store object took.
  virtual void Unlock(absl::string_view id) = 0;
  // memory: exact (expired entries swept first). redis: sessions and bytes are -1 (a scrape
  // never touches Redis); evictions 0 (Redis expires keys itself).
  virtual SessionStoreStats Stats() const = 0;
};

// spec: "memory" or "redis://HOST:PORT[/DB]". INVALID_ARGUMENT naming "--session_store" for a
// malformed spec. A redis store that cannot connect at start is still created (it connects
// lazily), so a server starts while Redis is briefly down; its calls fail UNAVAILABLE meanwhile.
absl::StatusOr<std::unique_ptr<SessionStore>> CreateSessionStore(
    absl::string_view spec, const SessionStoreOptions& options);

// The two implementations (CreateSessionStore picks one by spec).
std::unique_ptr<SessionStore> NewMemorySessionStore(const SessionStoreOptions& options);
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
};
// INVALID_ARGUMENT naming "--session_store" unless `url` is redis://HOST:PORT[/DB].
absl::StatusOr<RedisAddress> ParseRedisUrl(absl::string_view url);
std::unique_ptr<SessionStore> NewRedisSessionStore(std::string url, RedisAddress address,
                                                   const SessionStoreOptions& options);

// "session <id> is in use by another request" (ABORTED), shared by both stores.
absl::Status SessionInUseError(absl::string_view id);

}  // namespace abcd
