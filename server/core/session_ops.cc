#include "server/core/session_ops.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "engine/state/sequence_blob.h"
#include "server/core/utf8.h"

namespace abcd {
namespace {

constexpr absl::string_view kNew = "new";

absl::Status TooLarge(absl::string_view what, size_t bytes, int64_t limit) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " is ", bytes, " bytes, over --max_session_bytes (", limit, ")"));
}

}  // namespace

absl::Status SessionsNeedDecoderOnly() {
  return absl::InvalidArgumentError("session_id: sessions need a decoder-only model");
}

absl::Status SessionOps::Available() const {
  if (manager_ == nullptr) return absl::UnavailableError("sessions are not enabled");
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SessionLease>> SessionOps::Open(absl::string_view session_id,
                                                             const ServedModel& model,
                                                             GenerationRequest* request) const {
  if (session_id.empty()) return std::nullopt;
  if (model.kind != ModelKind::kLanguageModel) return SessionsNeedDecoderOnly();
  if (request->n > 1) return absl::InvalidArgumentError("n: must be 1 with a session");
  ABCD_RETURN_IF_ERROR(Available());
  absl::StatusOr<SessionLease> lease =
      session_id == kNew ? manager_->Create() : manager_->Continue(session_id);
  if (!lease.ok()) return lease.status();
  request->resume_state = lease->TakeBlob();
  request->save_state = true;
  return std::optional<SessionLease>(*std::move(lease));
}

absl::Status SessionOps::Commit(SessionLease lease, std::string saved_state) const {
  ABCD_RETURN_IF_ERROR(Available());
  if (saved_state.empty()) {
    return absl::InternalError(
        absl::StrCat("session ", lease.id(), ": the engine returned no state to save"));
  }
  if (static_cast<int64_t>(saved_state.size()) > max_session_bytes_) {
    return TooLarge(absl::StrCat("session ", lease.id(), ": its state"), saved_state.size(),
                    max_session_bytes_);
  }
  return manager_->Commit(std::move(lease), std::move(saved_state));
}

absl::StatusOr<SessionMetadata> SessionOps::Get(absl::string_view session_id) const {
  ABCD_RETURN_IF_ERROR(Available());
  ABCD_RETURN_IF_ERROR(SessionManager::CheckId(session_id));
  ABCD_ASSIGN_OR_RETURN(StoredSession stored, manager_->Get(session_id));
  ABCD_ASSIGN_OR_RETURN(SequenceBlobInfo info, PeekSequenceBlob(stored.blob));
  SessionMetadata metadata;
  metadata.session_id = std::string(session_id);
  metadata.model = info.model;
  metadata.tokens = info.tokens;
  metadata.bytes = static_cast<int64_t>(stored.blob.size());
  metadata.last_used = stored.last_used;
  return metadata;
}

absl::Status SessionOps::Delete(absl::string_view session_id) const {
  ABCD_RETURN_IF_ERROR(Available());
  ABCD_RETURN_IF_ERROR(SessionManager::CheckId(session_id));
  return manager_->Delete(session_id);
}

absl::StatusOr<std::string> SessionOps::Export(absl::string_view session_id) const {
  ABCD_RETURN_IF_ERROR(Available());
  ABCD_RETURN_IF_ERROR(SessionManager::CheckId(session_id));
  ABCD_ASSIGN_OR_RETURN(StoredSession stored, manager_->Get(session_id));
  return std::move(stored.blob);
}

absl::StatusOr<SessionMetadata> SessionOps::Import(std::string blob) const {
  ABCD_RETURN_IF_ERROR(Available());
  if (static_cast<int64_t>(blob.size()) > max_session_bytes_) {
    return TooLarge("state", blob.size(), max_session_bytes_);
  }
  if (blob.empty()) return absl::InvalidArgumentError("state: the session blob is empty");
  absl::StatusOr<SequenceBlobInfo> info = PeekSequenceBlob(blob);
  if (!info.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("state: ", info.status().message()));
  }
  const ServedModel* model = models_.FindByName(info->model);
  if (model == nullptr || model->kind != ModelKind::kLanguageModel || model->executor == nullptr) {
    std::vector<std::string> served;
    for (const ServedModel* m : models_.All()) {
      if (m->kind == ModelKind::kLanguageModel) served.push_back(m->name);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("state: the session blob is of model '", TruncateForMessage(info->model),
                     "', which this server does not serve (served language models: ",
                     absl::StrJoin(served, ", "), ")"));
  }
  if (absl::Status status = model->executor->CheckSessionState(blob); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("state: ", status.message()));
  }
  SessionMetadata metadata;
  metadata.model = model->name;
  metadata.tokens = info->tokens;
  metadata.bytes = static_cast<int64_t>(blob.size());
  ABCD_ASSIGN_OR_RETURN(metadata.session_id, manager_->Import(std::move(blob)));
  metadata.last_used = absl::Now();
  return metadata;
}

}  // namespace abcd
