// abcd-client: a small gRPC client for abcd-server.
//
//   abcd-client generate [--target HOST:PORT] --prompt TEXT [--max_tokens N] [--temperature T]
//                        [--top_k K] [--top_p P] [--seed S] [--stop STR] [--model NAME]
//                        [--session new|ID] [--n N] [--min_p P] [--presence_penalty P]
//                        [--frequency_penalty P] [--logit_bias ID:BIAS[,ID:BIAS...]]
//   abcd-client chat [--target HOST:PORT] [--system TEXT] [--user TEXT] [generate's sampling
//                    options, --max_tokens, --stop, --model]
//   abcd-client session get ID | delete ID | export ID FILE | import FILE [--target HOST:PORT]
//   abcd-client translate [--target HOST:PORT] --text TEXT [--beam_size N] [--max_tokens N]
//   abcd-client models [--target HOST:PORT]
//   abcd-client health [--target HOST:PORT] [--timeout_seconds S]   exit 0 iff SERVING
//
// Every command talks to --target (default localhost:50051), or with --port_file FILE to
// 127.0.0.1 at the grpc_port of the JSON that `abcd-server --port_file FILE` writes once serving
// (the image's HEALTHCHECK: it follows the configured port). The two flags are exclusive; a
// missing, unreadable or malformed file is an error naming it (exit 2).
//
// generate streams the text to stdout as it arrives and prints usage on stderr (with a session,
// also `session_id=ID`, the id to pass to the next turn). With --n > 1 the choices are printed
// once complete, one per line as `[i] text`. chat sends GenerateRequest.messages (rendered with
// the model's chat template by the server): with --user, one turn (after --system if given);
// without, a conversation read from stdin, one user turn per line, each answer streamed and
// kept in the history of the next turn. session export writes the session's state blob to
// FILE; session import stores FILE's blob as a new session (sent in chunks) and prints its
// metadata.
#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/core/arguments.h"

namespace abcd {
namespace {

constexpr char kUsage[] =
    "usage: abcd-client generate|chat|translate|models|health|session\n"
    "                   [--target HOST:PORT | --port_file FILE] [options]\n"
    "  generate  --prompt TEXT [--max_tokens N] [--temperature T] [--top_k K] [--top_p P]\n"
    "            [--repetition_penalty R] [--seed S] [--stop STR] [--model NAME]\n"
    "            [--session new|ID] [--n N] [--min_p P] [--presence_penalty P]\n"
    "            [--frequency_penalty P] [--logit_bias ID:BIAS[,ID:BIAS...]]\n"
    "  chat      [--system TEXT] [--user TEXT (else one turn per stdin line)] [generate's\n"
    "            sampling options, --max_tokens, --stop, --model]\n"
    "  session   get ID | delete ID | export ID FILE | import FILE\n"
    "  translate --text TEXT [--beam_size N] [--max_tokens N] [--model NAME]\n"
    "  models\n"
    "  health    [--timeout_seconds S]   exit status 0 when the server reports SERVING\n";

// The server's address: --target, or 127.0.0.1 at the grpc_port of --port_file's JSON.
absl::StatusOr<std::string> ResolveTarget(const Arguments& args) {
  if (!args.Has("port_file")) return args.String("target", "localhost:50051");
  if (args.Has("target")) {
    return absl::InvalidArgumentError("--target and --port_file are exclusive: give one");
  }
  const std::string path = args.String("port_file", "");
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port_file ", path, ": cannot read (", std::strerror(errno), ")"));
  }
  const nlohmann::json ports = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto port = ports.is_object() ? ports.find("grpc_port") : ports.end();
  if (!ports.is_object() || port == ports.end() || !port->is_number_integer() ||
      port->get<int64_t>() < 1 || port->get<int64_t>() > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--port_file ", path, ": not a JSON object with a grpc_port from 1 to 65535"));
  }
  return absl::StrCat("127.0.0.1:", port->get<int64_t>());
}

int Fail(const grpc::Status& status) {
  std::cerr << "abcd-client: " << status.error_code() << " " << status.error_message() << "\n";
  return 1;
}

// --logit_bias ID:BIAS[,ID:BIAS...] into the request's map.
absl::Status ParseLogitBias(const std::string& value, abcd::v1::SamplingParams* sampling) {
  for (absl::string_view entry : absl::StrSplit(value, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> pair = absl::StrSplit(entry, ':');
    int32_t id = 0;
    float bias = 0;
    if (pair.size() != 2 || !absl::SimpleAtoi(pair[0], &id) || !absl::SimpleAtof(pair[1], &bias)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--logit_bias must be ID:BIAS[,ID:BIAS...], got \"", entry, "\""));
    }
    (*sampling->mutable_logit_bias())[id] = bias;
  }
  return absl::OkStatus();
}

// The options generate and chat share: model, max_tokens, sampling, stop.
absl::Status ApplyOptions(const Arguments& args, abcd::v1::GenerateRequest& request) {
  request.set_model(args.String("model", ""));
  ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max_tokens", 0));
  request.set_max_tokens(static_cast<int32_t>(max_tokens));
  abcd::v1::SamplingParams* sampling = request.mutable_sampling();
  using Setter = void (abcd::v1::SamplingParams::*)(float);
  for (const auto& [name, set] : std::vector<std::pair<const char*, Setter>>{
           {"temperature", &abcd::v1::SamplingParams::set_temperature},
           {"top_p", &abcd::v1::SamplingParams::set_top_p},
           {"repetition_penalty", &abcd::v1::SamplingParams::set_repetition_penalty},
           {"min_p", &abcd::v1::SamplingParams::set_min_p},
           {"presence_penalty", &abcd::v1::SamplingParams::set_presence_penalty},
           {"frequency_penalty", &abcd::v1::SamplingParams::set_frequency_penalty}}) {
    if (!args.Has(name)) continue;
    ABCD_ASSIGN_OR_RETURN(const double value, args.Double(name, 0.0));
    (sampling->*set)(static_cast<float>(value));
  }
  if (args.Has("top_k")) {
    ABCD_ASSIGN_OR_RETURN(const int64_t k, args.Int("top_k", 0));
    sampling->set_top_k(static_cast<int32_t>(k));
  }
  if (args.Has("seed")) {
    ABCD_ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
    sampling->set_seed(static_cast<uint64_t>(seed));
  }
  if (args.Has("logit_bias")) {
    ABCD_RETURN_IF_ERROR(ParseLogitBias(args.String("logit_bias", ""), sampling));
  }
  if (args.Has("stop")) request.add_stop(args.String("stop", ""));
  return absl::OkStatus();
}

// Streams one request's text to stdout (n > 1: each choice once complete as `[i] text`) and
// its usage to stderr; `text` gets choice 0's text. 0, or 1 after printing a failed status.
int Stream(abcd::v1::Generator::Stub& stub, const abcd::v1::GenerateRequest& request,
           std::string* text = nullptr) {
  const int n = request.n();
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<abcd::v1::GenerateResponse>> reader =
      stub.Generate(&context, request);
  abcd::v1::GenerateResponse response;
  abcd::v1::GenerateResponse last;
  std::string session_id;
  std::map<int, std::string> choices;  // n > 1: printed once complete
  while (reader->Read(&response)) {
    choices[response.index()] += response.text();
    if (n <= 1) std::cout << response.text() << std::flush;
    if (!response.session_id().empty()) session_id = response.session_id();
    last = response;
  }
  const grpc::Status status = reader->Finish();
  if (n > 1) {
    for (const auto& [index, choice] : choices) std::cout << "[" << index << "] " << choice << "\n";
  } else {
    std::cout << "\n";
  }
  if (!status.ok()) return Fail(status);
  if (text != nullptr) *text = choices[0];
  std::cerr << "finish_reason=" << abcd::v1::FinishReason_Name(last.finish_reason())
            << " prompt_tokens=" << last.usage().prompt_tokens()
            << " cached_prompt_tokens=" << last.usage().cached_prompt_tokens()
            << " completion_tokens=" << last.usage().completion_tokens() << "\n";
  if (!session_id.empty()) std::cerr << "session_id=" << session_id << "\n";
  return 0;
}

absl::StatusOr<int> Generate(abcd::v1::Generator::Stub& stub, const Arguments& args) {
  abcd::v1::GenerateRequest request;
  ABCD_RETURN_IF_ERROR(ApplyOptions(args, request));
  request.set_prompt(args.String("prompt", ""));
  request.set_session_id(args.String("session", ""));
  ABCD_ASSIGN_OR_RETURN(const int64_t n, args.Int("n", 1));
  request.set_n(static_cast<int32_t>(n));
  return Stream(stub, request);
}

// One turn (--user), or one per stdin line with the answers kept in the history.
absl::StatusOr<int> Chat(abcd::v1::Generator::Stub& stub, const Arguments& args) {
  abcd::v1::GenerateRequest request;
  ABCD_RETURN_IF_ERROR(ApplyOptions(args, request));
  auto add = [&request](const std::string& role, const std::string& content) {
    abcd::v1::ChatMessage* message = request.add_messages();
    message->set_role(role);
    message->set_content(content);
  };
  if (args.Has("system")) add("system", args.String("system", ""));
  if (args.Has("user")) {
    add("user", args.String("user", ""));
    return Stream(stub, request);
  }
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    add("user", line);
    std::string answer;
    if (const int failed = Stream(stub, request, &answer); failed != 0) return failed;
    add("assistant", answer);
  }
  return 0;
}

void PrintSession(const abcd::v1::SessionInfo& info) {
  std::cout << "session_id=" << info.session_id() << " model=" << info.model()
            << " tokens=" << info.tokens() << " bytes=" << info.bytes()
            << " last_used_unix_ms=" << info.last_used_unix_ms() << "\n";
}

// session get ID | delete ID | export ID FILE | import FILE
absl::StatusOr<int> Session(abcd::v1::Generator::Stub& stub,
                            const std::vector<std::string>& operands) {
  const std::string action = operands.empty() ? "" : operands[0];
  const size_t want = action == "export" ? 3 : 2;
  if ((action != "get" && action != "delete" && action != "export" && action != "import") ||
      operands.size() != want) {
    return absl::InvalidArgumentError(
        "session needs one of: get ID, delete ID, export ID FILE, import FILE");
  }
  grpc::ClientContext context;
  if (action == "get") {
    abcd::v1::GetSessionRequest request;
    request.set_session_id(operands[1]);
    abcd::v1::SessionInfo info;
    const grpc::Status status = stub.GetSession(&context, request, &info);
    if (!status.ok()) return Fail(status);
    PrintSession(info);
    return 0;
  }
  if (action == "delete") {
    abcd::v1::DeleteSessionRequest request;
    request.set_session_id(operands[1]);
    abcd::v1::DeleteSessionResponse response;
    const grpc::Status status = stub.DeleteSession(&context, request, &response);
    if (!status.ok()) return Fail(status);
    std::cout << "deleted " << operands[1] << "\n";
    return 0;
  }
  if (action == "export") {
    abcd::v1::ExportSessionRequest request;
    request.set_session_id(operands[1]);
    abcd::v1::SessionState state;
    const grpc::Status status = stub.ExportSession(&context, request, &state);
    if (!status.ok()) return Fail(status);
    std::ofstream out(operands[2], std::ios::binary | std::ios::trunc);
    out << state.state();
    if (!out.flush()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write ", operands[2]));
    }
    std::cout << "wrote " << state.state().size() << " bytes to " << operands[2] << "\n";
    return 0;
  }
  std::ifstream in(operands[1], std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", operands[1]));
  std::stringstream bytes;
  bytes << in.rdbuf();
  // In 1 MiB chunks (ImportSessionChunks): a blob of any size up to --max_session_bytes.
  const std::string blob = bytes.str();
  constexpr size_t kChunk = size_t{1} << 20;
  abcd::v1::SessionInfo info;
  std::unique_ptr<grpc::ClientWriter<abcd::v1::SessionChunk>> writer =
      stub.ImportSessionChunks(&context, &info);
  for (size_t at = 0; at == 0 || at < blob.size(); at += kChunk) {
    abcd::v1::SessionChunk chunk;
    if (at == 0) chunk.set_total_bytes(static_cast<int64_t>(blob.size()));
    chunk.set_data(blob.substr(at, kChunk));
    if (!writer->Write(chunk)) break;  // the server has answered: Finish says why
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return Fail(status);
  PrintSession(info);
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
  // `session` takes operands (ACTION ID [FILE]) before its options.
  int first_option = 2;
  std::vector<std::string> operands;
  if (command == "session") {
    while (first_option < argc && std::string(argv[first_option]).rfind("--", 0) != 0) {
      operands.push_back(argv[first_option++]);
    }
  }
  absl::StatusOr<Arguments> args = Arguments::Parse({argv + first_option, argv + argc},
                                                    {"target",
                                                     "port_file",
                                                     "prompt",
                                                     "max_tokens",
                                                     "temperature",
                                                     "top_k",
                                                     "top_p",
                                                     "repetition_penalty",
                                                     "seed",
                                                     "stop",
                                                     "model",
                                                     "text",
                                                     "beam_size",
                                                     "timeout_seconds",
                                                     "session",
                                                     "n",
                                                     "min_p",
                                                     "presence_penalty",
                                                     "frequency_penalty",
                                                     "logit_bias",
                                                     "system",
                                                     "user"},
                                                    {});
  if (!args.ok()) {
    std::cerr << "abcd-client: " << args.status().message() << "\n" << kUsage;
    return 2;
  }
  const absl::StatusOr<std::string> target = ResolveTarget(*args);
  if (!target.ok()) {
    std::cerr << "abcd-client: " << target.status().message() << "\n";
    return 2;
  }
  auto channel = grpc::CreateChannel(*target, grpc::InsecureChannelCredentials());
  auto stub = abcd::v1::Generator::NewStub(channel);
  absl::StatusOr<int> result =
      absl::InvalidArgumentError(absl::StrCat("unknown command ", command));
  if (command == "generate") result = Generate(*stub, *args);
  if (command == "chat") result = Chat(*stub, *args);
  if (command == "translate") result = Translate(*stub, *args);
  if (command == "models") result = Models(*stub);
  if (command == "health") result = Health(channel, *args);
  if (command == "session") result = Session(*stub, operands);
  if (!result.ok()) {
    std::cerr << "abcd-client: " << result.status().message() << "\n" << kUsage;
    return 2;
  }
  return *result;
}

}  // namespace
}  // namespace abcd

int main(int argc, char** argv) { return abcd::Main(argc, argv); }
