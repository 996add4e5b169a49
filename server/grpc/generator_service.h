// gRPC frontend: abcd.v1.Generator on the callback API. One reactor per call; Generate keeps
// at most one write in flight and pulls the next token event in OnWriteDone; OnCancel (client
// gone or deadline) cancels the request in its Executor, which frees the state within one
// iteration. Every accepted call finishes exactly once. Nothing here blocks a gRPC thread or
// the engine thread.
//
// Generate and Translate are taken as raw bytes (request_reader.h): a string field that is not
// UTF-8 is INVALID_ARGUMENT naming it, logged once (event=bad_request) and counted, and an
// oversized prompt/text is refused from its length prefix before it is read.
#pragma once

#include <functional>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/string_view.h"
#include "server/core/served_models.h"

namespace abcd {

struct GrpcHooks {
  // Called once per finished call: kind "generate" | "translate" | "list_models", status label.
  std::function<void(absl::string_view kind, const absl::Status& status)> count_request;
};

class GeneratorService final : public abcd::v1::Generator::WithRawCallbackMethod_Generate<
                                   abcd::v1::Generator::WithRawCallbackMethod_Translate<
                                       abcd::v1::Generator::CallbackService>> {
 public:
  GeneratorService(const ServedModels& models, GrpcHooks hooks)
      : models_(models), hooks_(std::move(hooks)) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Translate(grpc::CallbackServerContext* context,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const abcd::v1::ListModelsRequest* request,
                                       abcd::v1::ListModelsResponse* response) override;

 private:
  const ServedModels& models_;
  GrpcHooks hooks_;
};

// absl and gRPC status codes are numerically identical.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace abcd
