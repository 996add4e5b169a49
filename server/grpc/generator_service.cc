#include "server/grpc/generator_service.h"

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/chat/chat_prompt.h"
#include "server/core/log.h"
#include "server/core/utf8.h"
#include "server/grpc/chunked_import.h"
#include "server/grpc/request_conversion.h"
#include "server/grpc/request_reader.h"

namespace abcd {
namespace {

abcd::v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return abcd::v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return abcd::v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return abcd::v1::FINISH_REASON_EOS;
  }
  return abcd::v1::FINISH_REASON_UNSPECIFIED;
}

absl::Time Deadline(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// gRPC cancels a call whose deadline expires (OnCancel, then the executor's CANCELLED): such a
// call ends, and is counted, as DEADLINE_EXCEEDED, as the client sees it. The server's deadline
// is the client's timeout counted from when the call arrived, so it falls after the client's
// own: a cancel up to kDeadlineSlack before it is the client's deadline expiring first.
constexpr absl::Duration kDeadlineSlack = absl::Milliseconds(500);
absl::Status DeadlineOr(const absl::Status& status, absl::Time deadline) {
  if (status.code() != absl::StatusCode::kCancelled || absl::Now() + kDeadlineSlack < deadline) {
    return status;
  }
  return absl::DeadlineExceededError("the call's deadline expired while it was being answered");
}

// Refuses `input_field` by its length when no served model of `kind` would accept it (the
// model field may come later on the wire); the chosen model checks again after parsing.
FieldSizeCheck InputSizeCheck(const ServedModels& models, ModelKind kind,
                              absl::string_view input_field) {
  return [&models, kind, input_field](absl::string_view name, size_t bytes) {
    if (name != input_field) return absl::OkStatus();
    absl::Status refusal;
    for (const ServedModel* model : models.All()) {
      if (model->kind != kind) continue;
      absl::Status status = model->executor->CheckInput(name, bytes);
      if (status.ok()) return status;
      if (refusal.ok()) refusal = std::move(status);
    }
    return refusal;
  };
}

// GenerateRequest.messages -> the prompt ids, on the same path as HTTP's chat completions. The
// render stops (CANCELLED / DEADLINE_EXCEEDED) when the call is cancelled or its deadline passes.
absl::Status RenderMessages(const abcd::v1::GenerateRequest& request, const ServedModel& model,
                            grpc::CallbackServerContext& context, absl::Time deadline,
                            GenerationRequest* out) {
  nlohmann::json messages = nlohmann::json::array();
  for (const abcd::v1::ChatMessage& message : request.messages()) {
    messages.push_back({{"role", message.role()}, {"content", message.content()}});
  }
  bool late = false;
  const std::function<bool()> cancelled = [&context, deadline, &late] {
    late = absl::Now() > deadline;
    return late || context.IsCancelled();
  };
  absl::StatusOr<std::vector<int32_t>> ids = chat::ChatPromptIds(
      model, messages, !request.has_add_generation_prompt() || request.add_generation_prompt(),
      cancelled);
  if (late && ids.status().code() == absl::StatusCode::kCancelled) {
    return absl::DeadlineExceededError(
        "messages: the call's deadline passed while the chat template rendered");
  }
  if (!ids.ok()) return ids.status();
  out->prompt_token_ids = *std::move(ids);  // the engine puts bos first where the model has one
  return absl::OkStatus();
}

// Reads a raw request; a refusal is logged once as event=bad_request.
absl::Status Read(const grpc::ByteBuffer& raw, const FieldSizeCheck& size_check,
                  absl::string_view rpc, google::protobuf::Message* out,
                  const FieldCountCheck& count_check = {}) {
  absl::Status status = ReadRequest(raw, size_check, out, count_check);
  if (!status.ok()) {
    LogEvent("bad_request", {{"rpc", std::string(rpc)}, {"error", std::string(status.message())}});
  }
  return status;
}

template <typename Message>
void Serialize(const Message& message, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  out->Clear();  // the writer requires an empty buffer (the previous write has completed)
  // Serialization of a message we built cannot fail.
  (void)grpc::SerializationTraits<Message>::Serialize(message, out, &own_buffer);
}

// Counts a finished call; one whose deadline expired is "deadline_exceeded" (DeadlineOr),
// one the client cancelled is "cancelled" whatever `status` says (a call cancelled before its
// message arrived has an empty request, which fails validation).
void CountCall(const GrpcHooks& hooks, absl::string_view kind, grpc::CallbackServerContext& context,
               const absl::Status& status) {
  if (!hooks.count_request) return;
  const bool cancelled =
      context.IsCancelled() && !status.ok() && status.code() != absl::StatusCode::kDeadlineExceeded;
  hooks.count_request(kind,
                      cancelled ? absl::CancelledError("the client cancelled the call") : status);
}

// Charges a request message to the body budget (gRPC holds it until the call ends). A call
// that ended before its message arrived (the client cancelled) has no message at all: CANCELLED.
absl::Status ChargeMessage(BodyBudget* budget, const grpc::ByteBuffer& raw,
                           BodyBudget::Charge* charge) {
  if (!raw.Valid()) return absl::CancelledError("the call ended before its request arrived");
  const int64_t bytes = static_cast<int64_t>(raw.Length());
  if (budget == nullptr || budget->TryCharge(bytes, "grpc", charge)) return absl::OkStatus();
  return absl::ResourceExhaustedError(budget->RefusalMessage(bytes));
}

// Streams one Generate call. Lives until OnDone; the executor's final event always arrives
// before Finish is called, so no callback can outlive the reactor. A session's lease lives as
// long as the reactor (dropped in OnDone, on a gRPC thread) unless it was committed.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw,
                  const ServedModels& models, const GrpcHooks& hooks, const GrpcOptions& options)
      : context_(context),
        hooks_(hooks),
        sessions_(options.sessions),
        deadline_(Deadline(*context)) {
    if (absl::Status charged = ChargeMessage(options.body_budget, raw, &charge_); !charged.ok()) {
      EndCall(charged);
      return;
    }
    abcd::v1::GenerateRequest request;
    const int max_prompt_tokens = options.max_prompt_tokens;
    // Counted while the raw bytes are scanned, before any element is copied or built: token
    // ids, and chat messages (each renders to at least one token of the prompt).
    const FieldCountCheck count_check = [max_prompt_tokens](absl::string_view name, int64_t count) {
      if (count <= max_prompt_tokens) return absl::OkStatus();
      if (name == "prompt_token_ids") {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt_token_ids has more than ", max_prompt_tokens, " tokens (--max_prompt_tokens)"));
      }
      if (name == "messages") {
        return absl::InvalidArgumentError(
            absl::StrCat("messages has more than ", max_prompt_tokens,
                         " entries, more than a prompt of --max_prompt_tokens (", max_prompt_tokens,
                         ") tokens could hold"));
      }
      return absl::OkStatus();
    };
    absl::Status status = Read(raw, InputSizeCheck(models, ModelKind::kLanguageModel, "prompt"),
                               "Generate", &request, count_check);
    // n before any work (n is allocated for per choice below, and checked again on enqueue).
    if (status.ok() && request.n() > options.max_choices) {
      status = absl::InvalidArgumentError(
          absl::StrCat("n must be in [1, ", options.max_choices, "], got ", request.n()));
    }
    if (status.ok() && !request.session_id().empty()) {
      const ServedModel* named = models.FindByName(request.model());
      if (named != nullptr && named->kind != ModelKind::kLanguageModel) {
        status = SessionsNeedDecoderOnly();
      }
    }
    absl::StatusOr<const ServedModel*> model =
        status.ok() ? models.Resolve(request.model(), ModelKind::kLanguageModel) : status;
    status = model.status();
    // Refusal before work: a prompt too large for any token limit is not even copied.
    if (status.ok()) status = (*model)->executor->CheckInput("prompt", request.prompt().size());
    absl::StatusOr<GenerationRequest> generation =
        status.ok() ? ToGenerationRequest(request, Deadline(*context)) : status;
    status = generation.status();
    if (status.ok() && !request.messages().empty()) {
      status = RenderMessages(request, **model, *context, generation->deadline, &*generation);
    }
    if (status.ok() && !request.session_id().empty()) {
      if (sessions_ == nullptr) {
        status = absl::UnavailableError("sessions are not enabled on this server");
      } else {
        absl::StatusOr<std::optional<SessionLease>> lease =
            sessions_->Open(request.session_id(), **model, &*generation);
        status = lease.status();
        if (lease.ok()) {
          lease_ = *std::move(lease);
          session_id_ = lease_->id();
        }
      }
    }
    if (status.ok()) {
      choice_ended_.assign(static_cast<size_t>(generation->n), false);
      executor_ = (*model)->executor.get();
      std::lock_guard<std::mutex> lock(mu_);
      absl::StatusOr<RequestId> id = executor_->Enqueue(
          *std::move(generation), [this](GenerationEvent event) { OnEvent(std::move(event)); });
      if (id.ok()) {
        id_ = *id;
      } else {
        status = id.status();
        executor_ = nullptr;
      }
    }
    if (!status.ok()) EndCall(status);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: stop generating for it
      executor_->Cancel(id_);
      client_gone_ = true;
    }
    if (commit_pending_) {  // the last response is out: save the session, then finish
      commit_pending_ = false;
      finished_ = true;
      if (!ok) {
        lock.unlock();
        return EndCall(absl::CancelledError("client went away"));
      }
      std::string state = std::move(saved_state_);
      std::optional<SessionLease> lease = std::move(lease_);
      lease_.reset();
      lock.unlock();
      // A gRPC thread: the store may block here up to its timeout (never the engine thread).
      absl::Status status = sessions_->Commit(*std::move(lease), std::move(state));
      return EndCall(status);
    }
    WriteNextLocked();
  }
  void OnCancel() override {
    if (executor_ != nullptr) executor_->Cancel(id_);
  }
  void OnDone() override {
    // Finish may be called under mu_ on another thread: wait for it to let go before deleting.
    { std::lock_guard<std::mutex> lock(mu_); }
    delete this;  // an uncommitted lease unlocks its session here, on a gRPC thread
  }

 private:
  void OnEvent(GenerationEvent event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    WriteNextLocked();
  }

  // At most one write in flight. Once the client is gone every queued event is dropped, up to
  // the final one, which ends the call: whatever was queued, the call finishes exactly once.
  void WriteNextLocked() {
    while (!writing_ && !finished_ && !commit_pending_ && !events_.empty()) {
      GenerationEvent event = std::move(events_.front());
      events_.pop_front();
      if (event.finished && !event.status.ok()) {
        finished_ = true;
        EndCall(event.status);
        return;
      }
      if (client_gone_) {
        if (event.finished) {
          finished_ = true;
          EndCall(absl::CancelledError("client went away"));
        }
        continue;
      }
      StartEventWrite(event);
    }
  }

  void StartEventWrite(GenerationEvent& event) {
    response_.Clear();
    response_.set_text(event.text);
    response_.set_index(event.index);
    for (int32_t id : event.token_ids) response_.add_token_ids(id);
    if (!session_id_.empty() && (first_response_ || event.finished)) {
      response_.set_session_id(session_id_);
    }
    first_response_ = false;
    // A choice's finish_reason is reported once (with n > 1 the request's last event may repeat
    // choice 0's end).
    const size_t index = static_cast<size_t>(event.index);  // in [0, n) (executor.h)
    if ((event.choice_finished || event.finished) && index < choice_ended_.size() &&
        !choice_ended_[index]) {
      choice_ended_[index] = true;
      response_.set_finish_reason(ToProto(event.finish_reason));
    }
    if (event.finished) {
      abcd::v1::Usage* usage = response_.mutable_usage();
      usage->set_prompt_tokens(event.prompt_tokens);
      usage->set_completion_tokens(event.completion_tokens);
      usage->set_cached_prompt_tokens(event.cached_prompt_tokens);
      Serialize(response_, &buffer_);
      if (lease_.has_value()) {  // commit on the gRPC thread that completes this write
        saved_state_ = std::move(event.saved_state);
        commit_pending_ = true;
        writing_ = true;
        StartWrite(&buffer_);
        return;
      }
      finished_ = true;
      CountCall(hooks_, "generate", *context_, absl::OkStatus());
      StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    writing_ = true;
    Serialize(response_, &buffer_);
    StartWrite(&buffer_);
  }

  void EndCall(const absl::Status& ended) {
    const absl::Status status = DeadlineOr(ended, deadline_);
    CountCall(hooks_, "generate", *context_, status);
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  BodyBudget::Charge charge_;  // the request message, held by gRPC until the call ends
  const GrpcHooks& hooks_;
  const SessionOps* const sessions_;
  const absl::Time deadline_;
  Executor* executor_ = nullptr;
  RequestId id_ = 0;
  std::mutex mu_;
  std::deque<GenerationEvent> events_;
  abcd::v1::GenerateResponse response_;
  grpc::ByteBuffer buffer_;  // response_ serialized, in flight
  bool writing_ = false;
  bool finished_ = false;
  bool client_gone_ = false;
  bool first_response_ = true;
  std::vector<bool> choice_ended_;
  std::optional<SessionLease> lease_;
  std::string session_id_;
  bool commit_pending_ = false;  // the last response is being written; then Commit
  std::string saved_state_;
};

// One Translate call: beam search in the translation model's executor, answered once.
class TranslateReactor final : public grpc::ServerUnaryReactor {
 public:
  TranslateReactor(grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw,
                   grpc::ByteBuffer* response, const ServedModels& models, const GrpcHooks& hooks,
                   BodyBudget* budget)
      : context_(context), response_(response), hooks_(hooks), deadline_(Deadline(*context)) {
    if (absl::Status charged = ChargeMessage(budget, raw, &charge_); !charged.ok()) {
      End(charged);
      return;
    }
    abcd::v1::TranslateRequest request;
    const absl::Status read =
        Read(raw, InputSizeCheck(models, ModelKind::kTranslation, "text"), "Translate", &request);
    absl::StatusOr<const ServedModel*> model =
        read.ok() ? models.Resolve(request.model(), ModelKind::kTranslation) : read;
    absl::Status status = model.status();
    if (status.ok()) status = (*model)->executor->CheckInput("text", request.text().size());
    absl::StatusOr<GenerationRequest> generation =
        status.ok() ? ToTranslationRequest(request, Deadline(*context)) : status;
    status = generation.status();
    if (status.ok()) {
      executor_ = (*model)->executor.get();
      std::lock_guard<std::mutex> lock(mu_);
      absl::StatusOr<RequestId> id = executor_->Enqueue(
          *std::move(generation), [this](GenerationEvent event) { OnEvent(std::move(event)); });
      if (id.ok()) {
        id_ = *id;
      } else {
        status = id.status();
        executor_ = nullptr;
      }
    }
    if (!status.ok()) End(status);
  }
  void OnCancel() override {
    if (executor_ != nullptr) executor_->Cancel(id_);
  }
  void OnDone() override {
    // Finish may be called under mu_ on another thread: wait for it to let go before deleting.
    { std::lock_guard<std::mutex> lock(mu_); }
    delete this;
  }

 private:
  void OnEvent(GenerationEvent event) {
    std::lock_guard<std::mutex> lock(mu_);
    translation_ += event.text;
    if (!event.finished) return;
    if (event.status.ok()) {
      abcd::v1::TranslateResponse response;
      response.set_translation(translation_);
      response.set_finish_reason(ToProto(event.finish_reason));
      response.mutable_usage()->set_prompt_tokens(event.prompt_tokens);
      response.mutable_usage()->set_completion_tokens(event.completion_tokens);
      Serialize(response, response_);
    }
    End(event.status);
  }
  void End(const absl::Status& ended) {
    const absl::Status status = DeadlineOr(ended, deadline_);
    CountCall(hooks_, "translate", *context_, status);
    Finish(ToGrpcStatus(status));
  }

  grpc::CallbackServerContext* const context_;
  BodyBudget::Charge charge_;
  grpc::ByteBuffer* response_;
  const GrpcHooks& hooks_;
  const absl::Time deadline_;
  Executor* executor_ = nullptr;
  RequestId id_ = 0;
  std::mutex mu_;
  std::string translation_;
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GeneratorService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateReactor(context, *request, models_, hooks_, options_);
}

grpc::ServerUnaryReactor* GeneratorService::Translate(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return new TranslateReactor(context, *request, response, models_, hooks_, options_.body_budget);
}

grpc::ServerUnaryReactor* GeneratorService::ListModels(grpc::CallbackServerContext* context,
                                                       const abcd::v1::ListModelsRequest*,
                                                       abcd::v1::ListModelsResponse* response) {
  for (const ServedModel* model : models_.All()) {
    abcd::v1::ModelInfo* info = response->add_models();
    info->set_name(model->name);
    info->set_kind(std::string(ModelKindName(model->kind)));
    info->set_state_bytes_per_sequence(model->state_bytes_per_sequence);
    int64_t kv_layers = 0;
    for (bool cross : model->model->state_layout().kv_is_cross) kv_layers += !cross;
    info->set_kv_bytes_per_token(kv_layers * model->model->state_layout().KvBytesPerToken());
  }
  if (hooks_.count_request) hooks_.count_request("list_models", absl::OkStatus());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GeneratorService::FinishUnary(grpc::CallbackServerContext* context,
                                                        const absl::Status& status) {
  CountCall(hooks_, "sessions", *context, status);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

namespace {

void FillSessionInfo(const SessionMetadata& metadata, abcd::v1::SessionInfo* info) {
  info->set_session_id(metadata.session_id);
  info->set_model(metadata.model);
  info->set_tokens(metadata.tokens);
  info->set_bytes(metadata.bytes);
  info->set_last_used_unix_ms(absl::ToUnixMillis(metadata.last_used));
}

absl::Status NoSessions() {
  return absl::UnavailableError("sessions are not enabled on this server");
}

}  // namespace

// The session rpcs call the store here, on the gRPC callback thread.
grpc::ServerUnaryReactor* GeneratorService::GetSession(grpc::CallbackServerContext* context,
                                                       const abcd::v1::GetSessionRequest* request,
                                                       abcd::v1::SessionInfo* response) {
  if (options_.sessions == nullptr) return FinishUnary(context, NoSessions());
  absl::StatusOr<SessionMetadata> metadata = options_.sessions->Get(request->session_id());
  if (metadata.ok()) FillSessionInfo(*metadata, response);
  return FinishUnary(context, metadata.status());
}

grpc::ServerUnaryReactor* GeneratorService::DeleteSession(
    grpc::CallbackServerContext* context, const abcd::v1::DeleteSessionRequest* request,
    abcd::v1::DeleteSessionResponse*) {
  if (options_.sessions == nullptr) return FinishUnary(context, NoSessions());
  return FinishUnary(context, options_.sessions->Delete(request->session_id()));
}

grpc::ServerUnaryReactor* GeneratorService::ExportSession(
    grpc::CallbackServerContext* context, const abcd::v1::ExportSessionRequest* request,
    abcd::v1::SessionState* response) {
  if (options_.sessions == nullptr) return FinishUnary(context, NoSessions());
  absl::StatusOr<std::string> blob = options_.sessions->Export(request->session_id());
  if (blob.ok()) response->set_state(*std::move(blob));
  return FinishUnary(context, blob.status());
}

grpc::ServerUnaryReactor* GeneratorService::ImportSession(grpc::CallbackServerContext* context,
                                                          const abcd::v1::SessionState* request,
                                                          abcd::v1::SessionInfo* response) {
  if (options_.sessions == nullptr) return FinishUnary(context, NoSessions());
  absl::StatusOr<SessionMetadata> metadata = options_.sessions->Import(request->state());
  if (metadata.ok()) FillSessionInfo(*metadata, response);
  return FinishUnary(context, metadata.status());
}

grpc::ServerReadReactor<abcd::v1::SessionChunk>* GeneratorService::ImportSessionChunks(
    grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response) {
  return StartChunkedImport(context, response, options_.sessions, options_.body_budget,
                            options_.chunked_import_timeout, [this](const absl::Status& status) {
                              if (hooks_.count_request) hooks_.count_request("sessions", status);
                            });
}

}  // namespace abcd
