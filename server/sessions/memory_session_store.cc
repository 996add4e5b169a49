// The in-memory SessionStore: one mutex over a hash map and a recency list ordered by the last
// Put. Since last_used is also set by Put, the list's tail is both the least recently used
// entry (evicted first beyond the byte budget) and the oldest last_used (expired first), so
// the TTL sweep that runs on every call only looks at the tail: O(1) per expired entry.
// `bytes` counts blob bytes (ids and bookkeeping are not charged to the budget).
#include <cstdint>
#include <list>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_store.h"

namespace abcd {
namespace {

class MemorySessionStore final : public SessionStore {
 public:
  explicit MemorySessionStore(const SessionStoreOptions& options)
      : budget_bytes_(options.budget_bytes), ttl_(options.ttl), clock_(options.clock) {
    if (!clock_) clock_ = [] { return absl::Now(); };
  }

  std::string name() const override { return "memory"; }

  absl::StatusOr<StoredSession> Get(absl::string_view id) override {
    absl::MutexLock lock(&mu_);
    SweepExpired(clock_());
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("session ", id, " not found"));
    }
    return StoredSession{it->second.blob, it->second.last_used};
  }

  absl::Status Put(absl::string_view id, std::string blob) override {
    const int64_t size = static_cast<int64_t>(blob.size());
    if (size > budget_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "session ", id, ": blob of ", size,
          " bytes exceeds the memory session store's budget of ", budget_bytes_, " bytes"));
    }
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_();
    SweepExpired(now);
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      bytes_ -= static_cast<int64_t>(it->second.blob.size());
      recency_.erase(it->second.position);
    } else {
      it = entries_.emplace(std::string(id), Entry{}).first;
    }
    recency_.push_front(it->first);
    it->second.position = recency_.begin();
    it->second.blob = std::move(blob);
    it->second.last_used = now;
    bytes_ += size;
    while (bytes_ > budget_bytes_) {  // never evicts the new entry: size <= budget
      Erase(recency_.back());
      ++evictions_;
    }
    return absl::OkStatus();
  }

  absl::Status Delete(absl::string_view id) override {
    absl::MutexLock lock(&mu_);
    SweepExpired(clock_());
    if (!entries_.contains(id)) {
      return absl::NotFoundError(absl::StrCat("session ", id, " not found"));
    }
    Erase(id);
    return absl::OkStatus();
  }

  absl::Status Lock(absl::string_view id) override {
    absl::MutexLock lock(&mu_);
    if (!locked_.emplace(id).second) return SessionInUseError(id);
    return absl::OkStatus();
  }

  void Unlock(absl::string_view id) override {
    absl::MutexLock lock(&mu_);
    locked_.erase(id);
  }

  SessionStoreStats Stats() const override {
    absl::MutexLock lock(&mu_);
    SweepExpired(clock_());
    return {static_cast<int64_t>(entries_.size()), bytes_, evictions_};
  }

 private:
  struct Entry {
    std::string blob;
    absl::Time last_used;
    std::list<std::string>::iterator position;
  };

  // Removes entries whose last Put is `ttl_` or more ago (expiry is not an eviction).
  void SweepExpired(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!recency_.empty()) {
      auto it = entries_.find(recency_.back());
      if (now - it->second.last_used < ttl_) break;
      Erase(recency_.back());
    }
  }

  void Erase(absl::string_view id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(id);
    bytes_ -= static_cast<int64_t>(it->second.blob.size());
    recency_.erase(it->second.position);  // `id` may point into this node: erase the map last
    entries_.erase(it);
  }

  const int64_t budget_bytes_;
  const absl::Duration ttl_;
  std::function<absl::Time()> clock_;

  mutable absl::Mutex mu_;
  // Mutable because Stats() sweeps expired entries before counting.
  mutable absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  mutable std::list<std::string> recency_ ABSL_GUARDED_BY(mu_);  // front: most recent Put
  mutable int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> locked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<SessionStore> NewMemorySessionStore(const SessionStoreOptions& options) {
  return std::make_unique<MemorySessionStore>(options);
}

}  // namespace abcd
