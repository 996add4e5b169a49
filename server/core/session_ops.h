// Session operations shared by the gRPC and HTTP frontends (issue 14): opening a session for a
// generate request, and the metadata / delete / export / import operations. Both protocols go
// through these functions so their checks and messages agree; the frontends only map the
// statuses onto their wire (MapStatusCode, ToGrpcStatus).
//
// Statuses: INVALID_ARGUMENT naming "session_id" (malformed id, translation model, n > 1),
// NOT_FOUND (unknown or expired), ABORTED (in use by another request), UNAVAILABLE naming the
// store (outage), FAILED_PRECONDITION (a blob of a model this server does not serve, or of
// another model than the one asked for), RESOURCE_EXHAUSTED (a blob over max_session_bytes).
//
// Blocking: the store may be remote (Redis); every call here may wait for it up to its timeout.
// Callers are frontend threads (gRPC callback threads, HTTP I/O threads), never the engine
// thread; the store fails fast during an outage (its circuit breaker).
//
// Thread-safety: every method may be called from any thread (SessionManager is thread-safe,
// ServedModels read-only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/scheduler/executor.h"
#include "server/core/served_models.h"
#include "server/sessions/session_manager.h"

namespace abcd {

struct SessionMetadata {
  std::string session_id;
  std::string model;   // the served model the blob belongs to
  int64_t tokens = 0;  // tokens the session has seen (bos, prompts, generated)
  int64_t bytes = 0;   // the stored blob's size
  absl::Time last_used;
};

class SessionOps {
 public:
  // `manager` may be null (then every session request is UNAVAILABLE); both must outlive this.
  SessionOps(SessionManager* manager, const ServedModels& models, int64_t max_session_bytes)
      : manager_(manager), models_(models), max_session_bytes_(max_session_bytes) {}

  // For a generate request naming `session_id` ("new" or an id; empty: no session, nullopt):
  // checks the model and n, then creates or continues the session (locked while the lease
  // lives) and sets request->resume_state / save_state. The caller commits on the final OK
  // event (Commit) and otherwise drops the lease (the session stays as it was).
  absl::StatusOr<std::optional<SessionLease>> Open(absl::string_view session_id,
                                                   const ServedModel& model,
                                                   GenerationRequest* request) const;
  // Saves the state the request ended with; errors name the session.
  absl::Status Commit(SessionLease lease, std::string saved_state) const;

  absl::StatusOr<SessionMetadata> Get(absl::string_view session_id) const;
  absl::Status Delete(absl::string_view session_id) const;
  absl::StatusOr<std::string> Export(absl::string_view session_id) const;
  // Finds the blob's model among the served ones (PeekSequenceBlob), lets its executor check
  // the blob (CheckSessionState) and stores it under a new id.
  absl::StatusOr<SessionMetadata> Import(std::string blob) const;

  int64_t max_session_bytes() const { return max_session_bytes_; }

 private:
  absl::Status Available() const;

  SessionManager* const manager_;
  const ServedModels& models_;
  const int64_t max_session_bytes_;
};

// The error for a session request on a model that cannot hold sessions.
absl::Status SessionsNeedDecoderOnly();

}  // namespace abcd
