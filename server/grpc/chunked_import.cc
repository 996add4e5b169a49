#include "server/grpc/chunked_import.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace abcd {
namespace {

class ChunkedImport final : public grpc::ServerReadReactor<abcd::v1::SessionChunk> {
 public:
  ChunkedImport(grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
                const SessionOps* sessions, BodyBudget* budget,
                std::function<void(const absl::Status&)> count)
      : context_(context),
        response_(response),
        sessions_(sessions),
        budget_(budget),
        count_(std::move(count)) {
    if (sessions_ == nullptr) {
      End(absl::UnavailableError("sessions are not enabled on this server"));
      return;
    }
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return Complete();  // the client has sent every chunk (or is gone)
    if (!started_) {
      started_ = true;
      if (absl::Status status = Admit(chunk_.total_bytes()); !status.ok()) return End(status);
    }
    if (chunk_.data().size() > total_ - blob_.size()) {
      return End(absl::InvalidArgumentError(
          absl::StrCat("chunks hold more than total_bytes (", total_, ")")));
    }
    blob_ += chunk_.data();
    chunk_.Clear();
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Admit(int64_t total) {
    const int64_t limit = sessions_->max_session_bytes();
    if (total <= 0 || total > limit) {
      return absl::InvalidArgumentError(absl::StrCat("total_bytes must be in [1, ", limit,
                                                     "] (--max_session_bytes), got ", total));
    }
    if (budget_ != nullptr && !budget_->TryCharge(total, "grpc", &charge_)) {
      return absl::ResourceExhaustedError(budget_->RefusalMessage(total));
    }
    total_ = static_cast<size_t>(total);
    blob_.reserve(total_);
    return absl::OkStatus();
  }

  void Complete() {
    if (context_->IsCancelled()) return End(absl::CancelledError("client cancelled the import"));
    if (!started_ || blob_.size() != total_) {
      return End(absl::InvalidArgumentError(
          absl::StrCat("chunks hold ", blob_.size(), " bytes, not total_bytes (", total_, ")")));
    }
    absl::StatusOr<SessionMetadata> metadata = sessions_->Import(std::move(blob_));
    if (metadata.ok()) {
      response_->set_session_id(metadata->session_id);
      response_->set_model(metadata->model);
      response_->set_tokens(metadata->tokens);
      response_->set_bytes(metadata->bytes);
      response_->set_last_used_unix_ms(absl::ToUnixMillis(metadata->last_used));
    }
    End(metadata.status());
  }

  void End(const absl::Status& status) {
    charge_.Release();
    blob_ = std::string();
    const bool cancelled = context_->IsCancelled();
    if (count_) count_(cancelled ? absl::CancelledError("cancelled") : status);
    Finish(status.ok() ? grpc::Status::OK
                       : grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                                      std::string(status.message())));
  }

  grpc::CallbackServerContext* const context_;
  abcd::v1::SessionInfo* const response_;
  const SessionOps* const sessions_;
  BodyBudget* const budget_;
  const std::function<void(const absl::Status&)> count_;
  abcd::v1::SessionChunk chunk_;
  bool started_ = false;
  size_t total_ = 0;
  std::string blob_;
  BodyBudget::Charge charge_;
};

}  // namespace

grpc::ServerReadReactor<abcd::v1::SessionChunk>* StartChunkedImport(
    grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
    const SessionOps* sessions, BodyBudget* budget,
    std::function<void(const absl::Status&)> count) {
  return new ChunkedImport(context, response, sessions, budget, std::move(count));
}

}  // namespace abcd
