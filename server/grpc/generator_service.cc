#include "server/grpc/generator_service.h"

#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/core/status_macros.h"
#include "server/core/log.h"
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

absl::StatusOr<const ServedModel*> FindModel(const ServedModels& models, const std::string& name,
                                             ModelKind kind) {
  const ServedModel* model = models.Find(name, kind);
  if (model != nullptr) return model;
  if (name.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", ModelKindName(kind), " model is being served"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model \"", TruncateForMessage(name), "\" is not a served ", ModelKindName(kind), " model"));
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

// Reads a raw request; a refusal is logged once as event=bad_request.
absl::Status Read(const grpc::ByteBuffer& raw, const FieldSizeCheck& size_check,
                  absl::string_view rpc, google::protobuf::Message* out) {
  absl::Status status = ReadRequest(raw, size_check, out);
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

// Streams one Generate call. Lives until OnDone; the executor's final event always arrives
// before Finish is called, so no callback can outlive the reactor.
class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GenerateReactor(grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw,
                  const ServedModels& models, const GrpcHooks& hooks)
      : hooks_(hooks) {
    abcd::v1::GenerateRequest request;
    const absl::Status read = Read(raw, InputSizeCheck(models, ModelKind::kLanguageModel, "prompt"),
                                   "Generate", &request);
    absl::StatusOr<const ServedModel*> model =
        read.ok() ? FindModel(models, request.model(), ModelKind::kLanguageModel) : read;
    absl::Status status = model.status();
    // Refusal before work: a prompt too large for any token limit is not even copied.
    if (status.ok()) status = (*model)->executor->CheckInput("prompt", request.prompt().size());
    absl::StatusOr<GenerationRequest> generation =
        status.ok() ? ToGenerationRequest(request, Deadline(*context)) : status;
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
    if (!status.ok()) EndCall(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: stop generating for it
      executor_->Cancel(id_);
      client_gone_ = true;
    }
    WriteNextLocked();
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
    events_.push_back(std::move(event));
    WriteNextLocked();
  }

  // At most one write in flight. Once the client is gone every queued event is dropped, up to
  // the final one, which ends the call: whatever was queued, the call finishes exactly once.
  void WriteNextLocked() {
    while (!writing_ && !finished_ && !events_.empty()) {
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

  void StartEventWrite(const GenerationEvent& event) {
    response_.Clear();
    response_.set_text(event.text);
    for (int32_t id : event.token_ids) response_.add_token_ids(id);
    if (event.finished) {
      response_.set_finish_reason(ToProto(event.finish_reason));
      response_.mutable_usage()->set_prompt_tokens(event.prompt_tokens);
      response_.mutable_usage()->set_completion_tokens(event.completion_tokens);
      finished_ = true;
      if (hooks_.count_request) hooks_.count_request("generate", absl::OkStatus());
      Serialize(response_, &buffer_);
      StartWriteAndFinish(&buffer_, grpc::WriteOptions(), grpc::Status::OK);
      return;
    }
    writing_ = true;
    Serialize(response_, &buffer_);
    StartWrite(&buffer_);
  }

  void EndCall(const absl::Status& status) {
    if (hooks_.count_request) hooks_.count_request("generate", status);
    Finish(ToGrpcStatus(status));
  }

  const GrpcHooks& hooks_;
  Executor* executor_ = nullptr;
  RequestId id_ = 0;
  std::mutex mu_;
  std::deque<GenerationEvent> events_;
  abcd::v1::GenerateResponse response_;
  grpc::ByteBuffer buffer_;  // response_ serialized, in flight
  bool writing_ = false;
  bool finished_ = false;
  bool client_gone_ = false;
};

// One Translate call: beam search in the translation model's executor, answered once.
class TranslateReactor final : public grpc::ServerUnaryReactor {
 public:
  TranslateReactor(grpc::CallbackServerContext* context, const grpc::ByteBuffer& raw,
                   grpc::ByteBuffer* response, const ServedModels& models, const GrpcHooks& hooks)
      : response_(response), hooks_(hooks) {
    abcd::v1::TranslateRequest request;
    const absl::Status read =
        Read(raw, InputSizeCheck(models, ModelKind::kTranslation, "text"), "Translate", &request);
    absl::StatusOr<const ServedModel*> model =
        read.ok() ? FindModel(models, request.model(), ModelKind::kTranslation) : read;
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
  void End(const absl::Status& status) {
    if (hooks_.count_request) hooks_.count_request("translate", status);
    Finish(ToGrpcStatus(status));
  }

  grpc::ByteBuffer* response_;
  const GrpcHooks& hooks_;
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
  return new GenerateReactor(context, *request, models_, hooks_);
}

grpc::ServerUnaryReactor* GeneratorService::Translate(grpc::CallbackServerContext* context,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return new TranslateReactor(context, *request, response, models_, hooks_);
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

}  // namespace abcd
