// The Redis SessionStore on hiredis' synchronous API.
//
// Keys: `abcd:session:<id>` holds 8 bytes of last_used (Unix microseconds, little-endian)
// followed by the blob, written by one `SET key value PX ttl` (binary safe, atomic);
// `abcd:session-lock:<id>` is the in-use mark, `SET NX PX lock_ttl` holding a token unique
// to this lock (this store object's random prefix and a counter), released by a
// compare-and-delete script, so a lock that expired and was taken again (by any replica) is
// never deleted by its previous holder. An unlock that fails (Redis unreachable or refusing
// writes) is retried after the next successful command instead of leaving the session locked
// until lock_ttl; the locks this object holds are also known locally, so a second Lock of
// one of them is ABORTED without a round trip.
//
// Connections: a small pool (options.max_connections) created lazily; a call takes an idle
// connection (or opens one), runs its command without holding any lock, and returns it. Any
// connection or I/O error (refused, timeout, EOF) frees that connection, trips the breaker and
// drops the idle ones: for options.breaker every call fails at once with UNAVAILABLE; the first
// call after that probes (others keep failing fast while it does) and a success closes the
// breaker. Error replies from Redis (LOADING, OOM, ...) are UNAVAILABLE but keep the connection.
// hiredis writes with write(2): the process must ignore SIGPIPE (abcd-server does). Host names
// are resolved by getaddrinfo(3) when a connection is opened, outside the timeout: a stalled
// resolver delays the calls that open connections.
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "hiredis/hiredis.h"
#include "server/sessions/random_id.h"
#include "server/sessions/session_store.h"

namespace abcd {
namespace {

constexpr char kSessionPrefix[] = "abcd:session:";
constexpr char kLockPrefix[] = "abcd:session-lock:";
constexpr size_t kHeaderBytes = 8;
constexpr size_t kMaxPendingUnlocks = 10000;
constexpr char kUnlockScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
    "return 0";

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Connection = std::unique_ptr<redisContext, ContextDeleter>;
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

int64_t Millis(absl::Duration d) { return std::max<int64_t>(1, absl::ToInt64Milliseconds(d)); }

// hiredis' errstr, with its timeout (EAGAIN on SO_RCVTIMEO) spelled out.
std::string ConnectionError(const redisContext* c) {
  const std::string error = c->errstr[0] != '\0' ? c->errstr : "connection lost";
  if (c->err == REDIS_ERR_IO &&
      (error == "Resource temporarily unavailable" || error == "Operation now in progress")) {
    return "timed out";
  }
  return error;
}

std::string EncodeValue(absl::Time last_used, const std::string& blob) {
  uint64_t micros = static_cast<uint64_t>(absl::ToUnixMicros(last_used));
  std::string value(kHeaderBytes, '\0');
  for (size_t i = 0; i < kHeaderBytes; ++i)
    value[i] = static_cast<char>((micros >> (8 * i)) & 0xff);
  value.append(blob);
  return value;
}

class RedisSessionStore final : public SessionStore {
 public:
  RedisSessionStore(std::string url, RedisAddress address, const SessionStoreOptions& options)
      : url_(std::move(url)),
        address_(std::move(address)),
        options_(options),
        token_prefix_(RandomHex128()) {}

  std::string name() const override { return url_; }

  absl::StatusOr<StoredSession> Get(absl::string_view id) override {
    const std::string key = absl::StrCat(kSessionPrefix, id);
    absl::StatusOr<Reply> reply = Command("GET", "GET %b", key.data(), key.size());
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_NIL) {
      return absl::NotFoundError(absl::StrCat("session ", id, " not found"));
    }
    if ((*reply)->type != REDIS_REPLY_STRING || (*reply)->len < kHeaderBytes) {
      return Unavailable(absl::StrCat("key ", key, " does not hold a session"));
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>((*reply)->str);
    uint64_t micros = 0;
    for (size_t i = 0; i < kHeaderBytes; ++i) micros |= uint64_t{bytes[i]} << (8 * i);
    return StoredSession{std::string((*reply)->str + kHeaderBytes, (*reply)->len - kHeaderBytes),
                         absl::FromUnixMicros(static_cast<int64_t>(micros))};
  }

  absl::Status Put(absl::string_view id, std::string blob) override {
    const std::string key = absl::StrCat(kSessionPrefix, id);
    const std::string value = EncodeValue(absl::Now(), blob);
    blob.clear();
    blob.shrink_to_fit();
    const std::string ttl = absl::StrCat(Millis(options_.ttl));
    // Binary safe like "%b"; the argv form sizes the command buffer once instead of growing
    // it while formatting (blobs can be megabytes).
    const char* argv[] = {"SET", key.data(), value.data(), "PX", ttl.data()};
    const size_t lengths[] = {3, key.size(), value.size(), 2, ttl.size()};
    return Run("SET", [&](redisContext* c) { return redisCommandArgv(c, 5, argv, lengths); })
        .status();
  }

  absl::Status Delete(absl::string_view id) override {
    const std::string key = absl::StrCat(kSessionPrefix, id);
    absl::StatusOr<Reply> reply = Command("DEL", "DEL %b", key.data(), key.size());
    if (!reply.ok()) return reply.status();
    if ((*reply)->type != REDIS_REPLY_INTEGER || (*reply)->integer == 0) {
      return absl::NotFoundError(absl::StrCat("session ", id, " not found"));
    }
    return absl::OkStatus();
  }

  absl::Status Lock(absl::string_view id) override {
    std::string token;
    {
      absl::MutexLock lock(&mu_);
      if (held_.contains(id)) return SessionInUseError(id);
      token = absl::StrCat(token_prefix_, "-", ++locks_taken_);
      held_.emplace(id, token);  // reserved: a concurrent Lock here is refused at once
    }
    const std::string key = absl::StrCat(kLockPrefix, id);
    const std::string ttl = absl::StrCat(Millis(options_.lock_ttl));
    absl::StatusOr<Reply> reply = Command("SET NX", "SET %b %b NX PX %s", key.data(), key.size(),
                                          token.data(), token.size(), ttl.c_str());
    absl::Status status = absl::OkStatus();
    if (!reply.ok()) {
      status = reply.status();
    } else if ((*reply)->type == REDIS_REPLY_NIL) {
      status = SessionInUseError(id);
    }
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      held_.erase(id);
    }
    return status;
  }

  void Unlock(absl::string_view id) override {
    std::string token;
    {
      absl::MutexLock lock(&mu_);
      auto it = held_.find(id);
      if (it == held_.end()) return;  // not held by this object
      token = std::move(it->second);
      held_.erase(it);
    }
    std::string key = absl::StrCat(kLockPrefix, id);
    if (!Command("EVAL", "EVAL %s 1 %b %b", kUnlockScript, key.data(), key.size(), token.data(),
                 token.size())
             .ok()) {
      absl::MutexLock lock(&mu_);
      // Bounded: beyond it, the lock expires after lock_ttl.
      if (pending_unlocks_.size() < kMaxPendingUnlocks) {
        pending_unlocks_.push_back({std::move(key), std::move(token)});
      }
    }
  }

  SessionStoreStats Stats() const override { return {-1, -1, 0}; }

 private:
  absl::Status Unavailable(absl::string_view why) const {
    return absl::UnavailableError(absl::StrCat("session store ", url_, " unavailable: ", why));
  }

  // Runs one command on a pooled connection. OK only for a non-error reply.
  template <typename... Args>
  absl::StatusOr<Reply> Command(absl::string_view what, const char* format, Args... args) {
    return Run(what, [&](redisContext* c) { return redisCommand(c, format, args...); });
  }

  // Runs `issue` (one synchronous hiredis command on the given context) on a pooled
  // connection. OK only for a non-error reply.
  template <typename Issue>
  absl::StatusOr<Reply> Run(absl::string_view what, Issue issue) {
    absl::StatusOr<Connection> connection = Acquire();
    if (!connection.ok()) return connection.status();
    Reply reply(static_cast<redisReply*>(issue(connection->get())));
    if (reply == nullptr) {  // I/O error: the connection is unusable
      const std::string error = ConnectionError(connection->get());
      connection->reset();
      return Trip(absl::StrCat(what, ": ", error));
    }
    if (!RetryUnlocks(connection->get())) {  // the connection broke: `reply` still stands
      const std::string error = ConnectionError(connection->get());
      connection->reset();
      (void)Trip(absl::StrCat("EVAL: ", error));
      return reply;
    }
    Release(*std::move(connection));
    if (reply->type == REDIS_REPLY_ERROR) {
      return Unavailable(absl::StrCat(what, ": ", absl::string_view(reply->str, reply->len)));
    }
    return reply;
  }

  absl::StatusOr<Connection> Acquire() {
    const absl::Time deadline = absl::Now() + options_.timeout;
    absl::MutexLock lock(&mu_);
    while (true) {
      const absl::Time now = absl::Now();
      if (now < broken_until_) return Unavailable(last_error_);
      if (!idle_.empty()) {
        Connection c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
      if (open_ < options_.max_connections) break;
      if (mu_.AwaitWithDeadline(absl::Condition(this, &RedisSessionStore::CanProceed), deadline)) {
        continue;
      }
      return Unavailable(absl::StrCat("all ", options_.max_connections, " connections busy for ",
                                      absl::FormatDuration(options_.timeout)));
    }
    ++open_;
    if (broken_until_ != absl::InfinitePast()) {
      // Half-open: this call probes; the others keep failing fast until it is done.
      broken_until_ = absl::Now() + options_.breaker;
    }
    mu_.Unlock();
    absl::StatusOr<Connection> c = Connect();
    mu_.Lock();
    if (!c.ok()) {
      --open_;
      TripLocked(c.status().message());
      return Unavailable(last_error_);
    }
    broken_until_ = absl::InfinitePast();
    return c;
  }

  // Runs the unlocks that failed earlier on `c`, which just answered a command. Those that
  // fail again stay pending. False if the connection broke (the rest stay pending).
  bool RetryUnlocks(redisContext* c) {
    std::vector<PendingUnlock> pending;
    {
      absl::MutexLock lock(&mu_);
      if (pending_unlocks_.empty()) return true;
      pending.swap(pending_unlocks_);
    }
    size_t i = 0;
    std::vector<PendingUnlock> again;
    for (; i < pending.size(); ++i) {
      const PendingUnlock& p = pending[i];
      Reply reply(
          static_cast<redisReply*>(redisCommand(c, "EVAL %s 1 %b %b", kUnlockScript, p.key.data(),
                                                p.key.size(), p.token.data(), p.token.size())));
      if (reply == nullptr) break;
      if (reply->type == REDIS_REPLY_ERROR) again.push_back(p);
    }
    for (; i < pending.size(); ++i) again.push_back(std::move(pending[i]));
    const bool connection_ok = c->err == 0;
    if (!again.empty()) {
      absl::MutexLock lock(&mu_);
      for (PendingUnlock& p : again) {
        if (pending_unlocks_.size() < kMaxPendingUnlocks) pending_unlocks_.push_back(std::move(p));
      }
    }
    return connection_ok;
  }

  bool CanProceed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !idle_.empty() || open_ < options_.max_connections || absl::Now() < broken_until_;
  }

  void Release(Connection c) {
    absl::MutexLock lock(&mu_);
    if (c != nullptr && absl::Now() >= broken_until_) {
      idle_.push_back(std::move(c));
    } else {
      --open_;
    }
  }

  absl::Status Trip(std::string error) {
    absl::MutexLock lock(&mu_);
    --open_;
    TripLocked(error);
    return Unavailable(last_error_);
  }

  void TripLocked(absl::string_view error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    last_error_ = std::string(error);
    broken_until_ = absl::Now() + options_.breaker;
    open_ -= static_cast<int>(idle_.size());  // the idle ones are likely dead too
    idle_.clear();
  }

  // Opens, sets the command timeout and selects the database. No lock held.
  absl::StatusOr<Connection> Connect() const {
    Connection c(redisConnectWithTimeout(address_.host.c_str(), address_.port,
                                         absl::ToTimeval(options_.timeout)));
    if (c == nullptr) return absl::InternalError("cannot allocate a Redis context");
    if (c->err != 0) return absl::UnavailableError(ConnectionError(c.get()));
    if (redisSetTimeout(c.get(), absl::ToTimeval(options_.timeout)) != REDIS_OK) {
      return absl::UnavailableError(ConnectionError(c.get()));
    }
    redisEnableKeepAlive(c.get());
    if (address_.db != 0) {
      Reply reply(static_cast<redisReply*>(redisCommand(c.get(), "SELECT %d", address_.db)));
      if (reply == nullptr) return absl::UnavailableError(ConnectionError(c.get()));
      if (reply->type == REDIS_REPLY_ERROR) {
        return absl::UnavailableError(
            absl::StrCat("SELECT ", address_.db, ": ", absl::string_view(reply->str, reply->len)));
      }
    }
    return c;
  }

  const std::string url_;
  const RedisAddress address_;
  const SessionStoreOptions options_;
  const std::string token_prefix_;  // random, unique to this object

  struct PendingUnlock {
    std::string key;
    std::string token;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> held_ ABSL_GUARDED_BY(mu_);  // id -> token
  int64_t locks_taken_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<PendingUnlock> pending_unlocks_ ABSL_GUARDED_BY(mu_);
  std::vector<Connection> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + in use + being opened
  absl::Time broken_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<SessionStore> NewRedisSessionStore(std::string url, RedisAddress address,
                                                   const SessionStoreOptions& options) {
  return std::make_unique<RedisSessionStore>(std::move(url), std::move(address), options);
}

}  // namespace abcd
