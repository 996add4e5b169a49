#include "server/sessions/session_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/sessions/random_id.h"

namespace abcd {

SessionLease::SessionLease(SessionLease&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)),
      id_(std::move(other.id_)),
      blob_(std::move(other.blob_)),
      is_new_(other.is_new_) {}

SessionLease& SessionLease::operator=(SessionLease&& other) noexcept {
  if (this != &other) {
    Release();
    store_ = std::exchange(other.store_, nullptr);
    id_ = std::move(other.id_);
    blob_ = std::move(other.blob_);
    is_new_ = other.is_new_;
  }
  return *this;
}

SessionLease::~SessionLease() { Release(); }

void SessionLease::Release() {
  if (store_ != nullptr) std::exchange(store_, nullptr)->Unlock(id_);
}

SessionManager::SessionManager(std::unique_ptr<SessionStore> store, SessionMetrics* metrics)
    : store_(std::move(store)), metrics_(metrics) {}

std::string SessionManager::NewId() { return RandomHex128(); }

absl::Status SessionManager::CheckId(absl::string_view id) {
  bool ok = id.size() == 32;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "session_id must be a session id from this server (32 lowercase hex characters)");
}

absl::Status SessionManager::Account(absl::string_view id, absl::Status status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInvalidArgument:
      return status;
    case absl::StatusCode::kNotFound:
      return absl::NotFoundError(absl::StrCat("session ", id, " not found (unknown or expired)"));
    default:
      if (metrics_ != nullptr) metrics_->CountStoreError();
      return status;
  }
}

absl::StatusOr<SessionLease> SessionManager::Create() {
  std::string id = NewId();
  if (absl::Status s = store_->Lock(id); !s.ok()) return Account(id, std::move(s));
  return SessionLease(store_.get(), std::move(id), std::string(), /*is_new=*/true);
}

absl::StatusOr<SessionLease> SessionManager::Continue(absl::string_view id) {
  if (absl::Status s = CheckId(id); !s.ok()) return s;
  if (absl::Status s = store_->Lock(id); !s.ok()) return Account(id, std::move(s));
  SessionLease lease(store_.get(), std::string(id), std::string(), /*is_new=*/false);
  absl::StatusOr<StoredSession> stored = store_->Get(id);
  if (!stored.ok()) {
    if (metrics_ != nullptr && absl::IsNotFound(stored.status())) metrics_->CountMiss();
    return Account(id, stored.status());  // the lease unlocks
  }
  if (metrics_ != nullptr) metrics_->CountHit();
  lease.blob_ = std::move(stored->blob);
  return lease;
}

absl::Status SessionManager::Commit(SessionLease lease, std::string blob) {
  if (!lease.held()) {
    return absl::InvalidArgumentError("session lease was already committed or moved from");
  }
  return Account(lease.id(), store_->Put(lease.id(), std::move(blob)));  // then `lease` unlocks
}

absl::StatusOr<StoredSession> SessionManager::Get(absl::string_view id) {
  if (absl::Status s = CheckId(id); !s.ok()) return s;
  absl::StatusOr<StoredSession> stored = store_->Get(id);
  if (!stored.ok()) return Account(id, stored.status());
  return stored;
}

absl::Status SessionManager::Delete(absl::string_view id) {
  if (absl::Status s = CheckId(id); !s.ok()) return s;
  return Account(id, store_->Delete(id));
}

absl::StatusOr<std::string> SessionManager::Import(std::string blob) {
  std::string id = NewId();
  if (absl::Status s = store_->Put(id, std::move(blob)); !s.ok()) return Account(id, std::move(s));
  return id;
}

void SessionManager::RefreshMetrics() {
  if (metrics_ != nullptr) metrics_->Refresh(store_->Stats());
}

}  // namespace abcd
