// gRPC frontend: abcd.v1.Generator on the callback API. One reactor per call; Generate keeps
// at most one write in flight and pulls the next token event in OnWriteDone; OnCancel (client
// gone or deadline) cancels the request in its Executor, which frees the state within one
// iteration. Every accepted call finishes exactly once. Nothing here blocks a gRPC thread or
// the engine thread.
//
// A call whose deadline expires while it is answered (gRPC cancels it) ends, and is counted,
// as DEADLINE_EXCEEDED, not CANCELLED. grpc.health.v1 answers for "" and "abcd.v1.Generator"
// (server/main.cc). Models are found by ServedModels::Resolve, as over HTTP.
//
// Generate and Translate are taken as raw bytes (request_reader.h): a string field that is not
// UTF-8 is INVALID_ARGUMENT naming it, logged once (event=bad_request) and counted, and an
// oversized prompt/text is refused from its length prefix before it is read, prompt_token_ids
// by their count before they are copied, and more messages than max_prompt_tokens before any
// is parsed; n above max_choices is refused right after reading, before any work.
// GenerateRequest.messages are rendered on the thread that starts the call by chat::ChatPromptIds,
// HTTP chat's own path.
//
// Sessions (issue 14): GenerateRequest.session_id "new" or an id opens the session through
// SessionOps on the gRPC thread that starts the call; the first and the last response carry
// the id. The final OK event's state is committed on a gRPC thread (after the last response's
// write completes, never on the engine thread); a failed commit ends the call with its status.
// Any other end drops the lease (the session stays as it was). GetSession, DeleteSession,
// ExportSession and ImportSession call the store on the gRPC callback thread (a store in an
// outage fails fast, see session_store.h); ImportSessionChunks takes blobs larger than one
// message (chunked_import.h). A call the client cancelled is counted as "cancelled", whatever
// else its request said (a call cancelled before its message arrived has an empty request). n > 1:
// every response carries its choice's index; a choice's last response has its finish_reason, the
// call's last one the usage.
#pragma once

#include <functional>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/body_budget.h"
#include "server/core/served_models.h"
#include "server/core/session_ops.h"

namespace abcd {

struct GrpcHooks {
  // Called once per finished call: kind "generate" | "translate" | "list_models", status label.
  std::function<void(absl::string_view kind, const absl::Status& status)> count_request;
};

struct GrpcOptions {
  // prompt_token_ids longer than this are refused unread, and so are more messages than this.
  int max_prompt_tokens = 4096;
  int max_choices = 16;  // n above this is refused before any work; keep equal to the executor's
  const SessionOps* sessions = nullptr;  // null: session requests are UNAVAILABLE
  // Request bodies in flight, shared with HTTP (not owned; null: none): a Generate or
  // Translate message is charged its size until the call ends (RESOURCE_EXHAUSTED when it does
  // not fit), ImportSessionChunks the buffer it holds as it grows (chunked_import.h).
  BodyBudget* body_budget = nullptr;
  // ImportSessionChunks: the whole blob within this of the call's start, else
  // DEADLINE_EXCEEDED and its budget released (HTTP's body timeout).
  absl::Duration chunked_import_timeout = absl::Seconds(30);
};

class GeneratorService final : public abcd::v1::Generator::WithRawCallbackMethod_Generate<
                                   abcd::v1::Generator::WithRawCallbackMethod_Translate<
                                       abcd::v1::Generator::CallbackService>> {
 public:
  GeneratorService(const ServedModels& models, GrpcHooks hooks, GrpcOptions options = {})
      : models_(models), hooks_(std::move(hooks)), options_(options) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Translate(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const abcd::v1::ListModelsRequest* request,
                                       abcd::v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const abcd::v1::GetSessionRequest* request,
                                       abcd::v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const abcd::v1::DeleteSessionRequest* request,
                                          abcd::v1::DeleteSessionResponse* response) override;
  grpc::ServerUnaryReactor* ExportSession(grpc::CallbackServerContext* context,
                                          const abcd::v1::ExportSessionRequest* request,
                                          abcd::v1::SessionState* response) override;
  grpc::ServerUnaryReactor* ImportSession(grpc::CallbackServerContext* context,
                                          const abcd::v1::SessionState* request,
                                          abcd::v1::SessionInfo* response) override;
  grpc::ServerReadReactor<abcd::v1::SessionChunk>* ImportSessionChunks(
      grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response) override;

 private:
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        const absl::Status& status);

  const ServedModels& models_;
  GrpcHooks hooks_;
  GrpcOptions options_;
};

// absl and gRPC status codes are numerically identical.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace abcd
