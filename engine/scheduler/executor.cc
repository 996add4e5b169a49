// The Executor's free helpers and the defaults of its virtual methods.
#include "engine/scheduler/executor.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace abcd {

absl::Status CheckInputBytes(absl::string_view field, size_t bytes, int64_t token_limit) {
  const int64_t limit = token_limit * kMaxInputBytesPerToken;
  if (static_cast<int64_t>(bytes) <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", bytes, " bytes, more than ", limit, " (", kMaxInputBytesPerToken,
                   " bytes per token of the limit of ", token_limit, " tokens); refused unread"));
}

absl::Status Executor::CheckInput(absl::string_view, size_t) const { return absl::OkStatus(); }

absl::Status Executor::CheckSessionState(absl::string_view) const {
  return absl::FailedPreconditionError("this executor cannot resume sessions");
}

absl::StatusOr<std::vector<RequestId>> Executor::EnqueueBatch(
    std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) {
  if (requests.size() != callbacks.size() || requests.empty()) {
    return absl::InvalidArgumentError("a batch needs one callback per request, at least one");
  }
  std::vector<RequestId> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<RequestId> id = Enqueue(std::move(requests[i]), std::move(callbacks[i]));
    if (!id.ok()) {
      for (RequestId accepted : ids) Cancel(accepted);
      return absl::Status(id.status().code(),
                          absl::StrCat("texts[", i, "]: ", id.status().message()));
    }
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace abcd
