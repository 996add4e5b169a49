// Sessions as the frontends use them: server-chosen ids, the in-use lock held for one request
// (a SessionLease), save on success, and the session metrics.
//
// Thread-safety: every SessionManager method may be called from any thread concurrently. A
// SessionLease belongs to one request (not thread-safe itself); the manager must outlive its
// leases.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/sessions/session_metrics.h"
#include "server/sessions/session_store.h"

namespace abcd {

// A session held for one request: the id is locked in the store while the lease lives; the
// destructor unlocks without saving (a cancelled or failed request leaves the session as it
// was). SessionManager::Commit saves and releases it.
class SessionLease {
 public:
  SessionLease(SessionLease&& other) noexcept;
  SessionLease& operator=(SessionLease&& other) noexcept;
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;
  ~SessionLease();

  const std::string& id() const { return id_; }
  const std::string& blob() const { return blob_; }  // empty for a new session
  // Moves the blob out (to restore it without a copy); blob() is empty afterwards.
  std::string TakeBlob() {
    std::string blob;
    blob.swap(blob_);
    return blob;
  }
  bool is_new() const { return is_new_; }
  // False once moved from or committed.
  bool held() const { return store_ != nullptr; }

 private:
  friend class SessionManager;
  SessionLease(SessionStore* store, std::string id, std::string blob, bool is_new)
      : store_(store), id_(std::move(id)), blob_(std::move(blob)), is_new_(is_new) {}
  void Release();

  SessionStore* store_ = nullptr;  // null: nothing to unlock
  std::string id_;
  std::string blob_;
  bool is_new_ = false;
};

class SessionManager {
 public:
  // `metrics` may be null; else it must outlive the manager.
  SessionManager(std::unique_ptr<SessionStore> store, SessionMetrics* metrics);

  // 32 lowercase hex chars (128 bits) from getrandom(2); never client-chosen.
  static std::string NewId();
  // INVALID_ARGUMENT naming "session_id" unless 32 lowercase hex chars.
  static absl::Status CheckId(absl::string_view id);

  // A new session: fresh id, locked, empty blob.
  absl::StatusOr<SessionLease> Create();
  // An existing one: CheckId, Lock (ABORTED naming the session), Get (NOT_FOUND "session <id>
  // not found (unknown or expired)"; UNAVAILABLE naming the store). Counts a hit or a miss.
  absl::StatusOr<SessionLease> Continue(absl::string_view id);
  // Saves `blob` under the lease's id and releases the lease (also when saving fails, in which
  // case the stored session is what it was). INVALID_ARGUMENT for a lease no longer held.
  absl::Status Commit(SessionLease lease, std::string blob);
  // Metadata/export: no lock needed. NOT_FOUND as Continue.
  absl::StatusOr<StoredSession> Get(absl::string_view id);
  absl::Status Delete(absl::string_view id);
  // Import: stores `blob` (already validated by the caller) under a new id, returns the id.
  absl::StatusOr<std::string> Import(std::string blob);

  // Sets the stored/bytes gauges and evictions from store().Stats() (no-op without metrics).
  // The server calls it before rendering /metrics (ServerMetrics::AddRenderHook).
  void RefreshMetrics();

  const SessionStore& store() const { return *store_; }

 private:
  // Counts a store failure (anything but OK, NOT_FOUND, ABORTED, INVALID_ARGUMENT) and turns
  // NOT_FOUND into "session <id> not found (unknown or expired)".
  absl::Status Account(absl::string_view id, absl::Status status);

  const std::unique_ptr<SessionStore> store_;
  SessionMetrics* const metrics_;
};

}  // namespace abcd
