// RequestIntake: the Executor's front half, before a request is queued. Validates a
// GenerationRequest (INVALID_ARGUMENT naming the field), refuses a text by its size before
// tokenizing it, tokenizes, resumes a session blob, checks the model's position limits and
// prices the request's worst-case state bytes (DecodeBackend::RequestBytes), producing the
// ActiveRequest the engine thread runs.
// Thread-safety: every method is const and may run on any thread at once; it reads only the
// backend's constant accessors (config, RequestBytes, CheckSnapshot) and the tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend/decode_backend.h"
#include "engine/scheduler/active_request.h"
#include "engine/scheduler/executor.h"
#include "engine/state/sequence_blob.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {
namespace executor_internal {

inline constexpr int kMaxBeamSize = 16;
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopLength = 256;

class RequestIntake {
 public:
  // `backend` and `tokenizer` must outlive the intake.
  RequestIntake(const DecodeBackend& backend, const Tokenizer& tokenizer,
                const ExecutorOptions& options)
      : backend_(backend), config_(backend.config()), tokenizer_(tokenizer), options_(options) {}

  // Executor::CheckInput: the size check made before tokenizing.
  absl::Status CheckInput(absl::string_view field, size_t bytes) const {
    return CheckInputBytes(field, bytes, InputTokenLimit());
  }
  // Executor::CheckSessionState.
  absl::Status CheckSessionState(absl::string_view blob) const {
    return DecodeSession(blob).status();
  }
  // One request validated, tokenized and priced (reserved_bytes), ready to queue.
  absl::StatusOr<std::unique_ptr<ActiveRequest>> Prepare(GenerationRequest request,
                                                         EventCallback callback) const;
  // Executor::EnqueueBatch's checks: all or none, errors prefixed "texts[i]: ", and an
  // encoder-decoder batch's total bytes and source tokens bounded by max_batch_source_tokens.
  absl::StatusOr<std::vector<std::unique_ptr<ActiveRequest>>> PrepareBatch(
      std::vector<GenerationRequest> requests, std::vector<EventCallback> callbacks) const;

 private:
  absl::Status Validate(const GenerationRequest& request) const;
  int64_t InputTokenLimit() const {
    return config_.is_encoder_decoder() ? options_.max_source_tokens : options_.max_prompt_tokens;
  }
  // The prompt's tokens (without bos): its text tokenized, or its ids checked.
  absl::StatusOr<std::vector<int32_t>> PromptTokens(const GenerationRequest& request) const;
  // A session blob with every check CheckSessionState makes.
  absl::StatusOr<SequenceBlob> DecodeSession(absl::string_view bytes) const;
  // Puts a session's history and state into `r` (request.resume_state).
  absl::Status Resume(ActiveRequest& r) const;

  const DecodeBackend& backend_;
  const ModelConfig& config_;
  const Tokenizer& tokenizer_;
  const ExecutorOptions options_;
};

}  // namespace executor_internal
}  // namespace abcd
