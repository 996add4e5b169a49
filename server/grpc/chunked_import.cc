#include "server/grpc/chunked_import.h"

#include <grpcpp/alarm.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace abcd {
namespace {

// The buffer's first size and least growth, so small chunks do not reallocate it each time.
constexpr size_t kMinGrowth = size_t{64} << 10;

class ChunkedImport final : public grpc::ServerReadReactor<abcd::v1::SessionChunk> {
 public:
  ChunkedImport(grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
                const SessionOps* sessions, BodyBudget* budget, absl::Duration receive_timeout,
                std::function<void(const absl::Status&)> count)
      : context_(context),
        response_(response),
        sessions_(sessions),
        budget_(budget),
        receive_timeout_(receive_timeout),
        count_(std::move(count)) {
    std::lock_guard<std::mutex> lock(mu_);
    // The alarm's callback always runs (with false when cancelled in OnDone): it holds the
    // second reference.
    const absl::Duration timeout = std::min(receive_timeout, absl::Hours(24 * 365));
    alarm_.Set(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout),
               [this](bool fired) { OnDeadline(fired); });
    if (sessions_ == nullptr) {
      End(absl::UnavailableError("sessions are not enabled on this server"));
      return;
    }
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (ended_) return;  // the deadline ended the call
    if (!ok) {           // the client has sent every chunk (or is gone)
      ended_ = true;     // the deadline can no longer end it; the store is called unlocked
      lock.unlock();
      return Complete();
    }
    if (!started_) {
      started_ = true;
      if (absl::Status status = Admit(chunk_.total_bytes()); !status.ok()) return End(status);
    }
    const std::string& data = chunk_.data();
    if (data.size() > total_ - blob_.size()) {
      return End(absl::InvalidArgumentError(
          absl::StrCat("chunks hold more than total_bytes (", total_, ")")));
    }
    if (absl::Status status = Reserve(blob_.size() + data.size()); !status.ok()) {
      return End(status);
    }
    blob_ += data;
    chunk_.Clear();
    StartRead(&chunk_);
  }

  void OnDone() override {
    alarm_.Cancel();  // its callback then runs at once, with false
    Unref();
  }

 private:
  void OnDeadline(bool fired) {
    if (fired) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ended_) {
        End(absl::DeadlineExceededError(absl::StrCat(
            "session chunks not received within ", absl::FormatDuration(receive_timeout_),
            " of the call's start (", blob_.size(), " of total_bytes ", total_, " received)")));
      }
    }
    Unref();
  }

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  absl::Status Admit(int64_t total) {
    const int64_t limit = sessions_->max_session_bytes();
    if (total <= 0 || total > limit) {
      return absl::InvalidArgumentError(absl::StrCat("total_bytes must be in [1, ", limit,
                                                     "] (--max_session_bytes), got ", total));
    }
    if (budget_ != nullptr && total > budget_->LimitFor(total)) {  // could never be held
      budget_->TryResize(total, "grpc", &charge_);                 // refused, and counted
      return absl::ResourceExhaustedError(budget_->RefusalMessage(total));
    }
    total_ = static_cast<size_t>(total);
    return absl::OkStatus();
  }

  // Makes room for `needed` bytes (<= total_), charging the larger buffer before it is made.
  absl::Status Reserve(size_t needed) {
    if (needed <= blob_.capacity()) return absl::OkStatus();
    const size_t size = std::min(total_, std::max({needed, 2 * blob_.capacity(), kMinGrowth}));
    const int64_t bytes = static_cast<int64_t>(size);
    if (budget_ != nullptr && !budget_->TryResize(bytes, "grpc", &charge_)) {
      return absl::ResourceExhaustedError(budget_->RefusalMessage(bytes));
    }
    std::string bigger;
    bigger.reserve(size);  // from an empty string: exactly `size`
    bigger.append(blob_);
    blob_ = std::move(bigger);
    return absl::OkStatus();
  }

  // After ended_ was set: nothing else touches the call's state any more.
  void Complete() {
    if (context_->IsCancelled()) {
      return FinishCall(absl::CancelledError("client cancelled the import"));
    }
    if (!started_ || blob_.size() != total_) {
      return FinishCall(absl::InvalidArgumentError(
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
    FinishCall(metadata.status());
  }

  // Under mu_, once: ends the call (a read still pending then completes with false).
  void End(const absl::Status& status) {
    ended_ = true;
    FinishCall(status);
  }

  // Releases the buffer and its charge, counts and finishes the call.
  void FinishCall(const absl::Status& status) {
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
  const absl::Duration receive_timeout_;
  const std::function<void(const absl::Status&)> count_;
  std::atomic<int> refs_{2};  // OnDone and the alarm's callback
  grpc::Alarm alarm_;
  std::mutex mu_;
  bool ended_ = false;
  abcd::v1::SessionChunk chunk_;
  bool started_ = false;
  size_t total_ = 0;
  std::string blob_;
  BodyBudget::Charge charge_;
};

}  // namespace

grpc::ServerReadReactor<abcd::v1::SessionChunk>* StartChunkedImport(
    grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
    const SessionOps* sessions, BodyBudget* budget, absl::Duration receive_timeout,
    std::function<void(const absl::Status&)> count) {
  return new ChunkedImport(context, response, sessions, budget, receive_timeout, std::move(count));
}

}  // namespace abcd
