// abcd-client: a small gRPC client for abcd-server.
//
//   abcd-client generate [--target HOST:PORT] --prompt TEXT [--max_tokens N] [--temperature T]
//                        [--top_k K] [--top_p P] [--seed S] [--stop STR] [--model NAME]
//   abcd-client translate [--target HOST:PORT] --text TEXT [--beam_size N] [--max_tokens N]
//   abcd-client models [--target HOST:PORT]
//   abcd-client health [--target HOST:PORT] [--timeout_seconds S]   exit 0 iff SERVING
//
// generate streams the text to stdout as it arrives and prints usage on stderr.
#include <grpcpp/grpcpp.h>

#include <iostream>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/core/arguments.h"

namespace abcd {
namespace {

constexpr char kUsage[] =
    "usage: abcd-client generate|translate|models|health [--target HOST:PORT] [options]\n"
    "  generate  --prompt TEXT [--max_tokens N] [--temperature T] [--top_k K] [--top_p P]\n"
    "            [--repetition_penalty R] [--seed S] [--stop STR] [--model NAME]\n"
    "  translate --text TEXT [--beam_size N] [--max_tokens N] [--model NAME]\n"
    "  models\n"
    "  health    [--timeout_seconds S]   exit status 0 when the server reports SERVING\n";

int Fail(const grpc::Status& status) {
  std::cerr << "abcd-client: " << status.error_code() << " " << status.error_message() << "\n";
  return 1;
}

absl::StatusOr<int> Generate(abcd::v1::Generator::Stub& stub, const Arguments& args) {
  abcd::v1::GenerateRequest request;
  request.set_model(args.String("model", ""));
  request.set_prompt(args.String("prompt", ""));
  ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max_tokens", 0));
  request.set_max_tokens(static_cast<int32_t>(max_tokens));
  abcd::v1::SamplingParams* sampling = request.mutable_sampling();
  if (args.Has("temperature")) {
    ABCD_ASSIGN_OR_RETURN(const double t, args.Double("temperature", 1.0));
    sampling->set_temperature(static_cast<float>(t));
  }
  if (args.Has("top_k")) {
    ABCD_ASSIGN_OR_RETURN(const int64_t k, args.Int("top_k", 0));
    sampling->set_top_k(static_cast<int32_t>(k));
  }
  if (args.Has("top_p")) {
    ABCD_ASSIGN_OR_RETURN(const double p, args.Double("top_p", 1.0));
    sampling->set_top_p(static_cast<float>(p));
  }
  if (args.Has("repetition_penalty")) {
    ABCD_ASSIGN_OR_RETURN(const double r, args.Double("repetition_penalty", 1.0));
    sampling->set_repetition_penalty(static_cast<float>(r));
  }
  if (args.Has("seed")) {
    ABCD_ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
    sampling->set_seed(static_cast<uint64_t>(seed));
  }
  if (args.Has("stop")) request.add_stop(args.String("stop", ""));
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<abcd::v1::GenerateResponse>> reader =
      stub.Generate(&context, request);
  abcd::v1::GenerateResponse response;
  abcd::v1::GenerateResponse last;
  while (reader->Read(&response)) {
    std::cout << response.text() << std::flush;
    last = response;
  }
  const grpc::Status status = reader->Finish();
  std::cout << "\n";
  if (!status.ok()) return Fail(status);
  std::cerr << "finish_reason=" << abcd::v1::FinishReason_Name(last.finish_reason())
            << " prompt_tokens=" << last.usage().prompt_tokens()
            << " completion_tokens=" << last.usage().completion_tokens() << "\n";
  return 0;
}

absl::StatusOr<int> Translate(abcd::v1::Generator::Stub& stub, const Arguments& args) {
  abcd::v1::TranslateRequest request;
  request.set_model(args.String("model", ""));
  request.set_text(args.String("text", ""));
  ABCD_ASSIGN_OR_RETURN(const int64_t beam, args.Int("beam_size", 0));
  ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max_tokens", 0));
  request.set_beam_size(static_cast<int32_t>(beam));
  request.set_max_tokens(static_cast<int32_t>(max_tokens));
  grpc::ClientContext context;
  abcd::v1::TranslateResponse response;
  const grpc::Status status = stub.Translate(&context, request, &response);
  if (!status.ok()) return Fail(status);
  std::cout << response.translation() << "\n";
  return 0;
}

absl::StatusOr<int> Models(abcd::v1::Generator::Stub& stub) {
  grpc::ClientContext context;
  abcd::v1::ListModelsResponse response;
  const grpc::Status status = stub.ListModels(&context, {}, &response);
  if (!status.ok()) return Fail(status);
  for (const auto& m : response.models()) {
    std::cout << m.name() << "\t" << m.kind()
              << "\tstate_bytes_per_sequence=" << m.state_bytes_per_sequence()
              << "\tkv_bytes_per_token=" << m.kv_bytes_per_token() << "\n";
  }
  return 0;
}

absl::StatusOr<int> Health(const std::shared_ptr<grpc::Channel>& channel, const Arguments& args) {
  ABCD_ASSIGN_OR_RETURN(const double timeout, args.Double("timeout_seconds", 3.0));
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000)));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, {}, &response);
  if (!status.ok()) return Fail(status);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  absl::StatusOr<Arguments> args = Arguments::Parse(
      {argv + 2, argv + argc},
      {"target", "prompt", "max_tokens", "temperature", "top_k", "top_p", "repetition_penalty",
       "seed", "stop", "model", "text", "beam_size", "timeout_seconds"},
      {});
  if (!args.ok()) {
    std::cerr << "abcd-client: " << args.status().message() << "\n" << kUsage;
    return 2;
  }
  auto channel = grpc::CreateChannel(args->String("target", "localhost:50051"),
                                     grpc::InsecureChannelCredentials());
  auto stub = abcd::v1::Generator::NewStub(channel);
  absl::StatusOr<int> result =
      absl::InvalidArgumentError(absl::StrCat("unknown command ", command));
  if (command == "generate") result = Generate(*stub, *args);
  if (command == "translate") result = Translate(*stub, *args);
  if (command == "models") result = Models(*stub);
  if (command == "health") result = Health(channel, *args);
  if (!result.ok()) {
    std::cerr << "abcd-client: " << result.status().message() << "\n" << kUsage;
    return 2;
  }
  return *result;
}

}  // namespace
}  // namespace abcd

int main(int argc, char** argv) { return abcd::Main(argc, argv); }
