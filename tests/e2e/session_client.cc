#include "tests/e2e/session_client.h"

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/e2e/metric_sample.h"
#include "tests/e2e/server_suite.h"

namespace abcd::testing {

std::vector<int32_t> GrpcTurn::tokens(int index) const {
  std::vector<int32_t> out;
  for (const auto& r : responses) {
    if (r.index() == index) out.insert(out.end(), r.token_ids().begin(), r.token_ids().end());
  }
  return out;
}

std::string GrpcTurn::first_session_id() const {
  return responses.empty() ? "" : responses.front().session_id();
}

std::string GrpcTurn::last_session_id() const {
  return responses.empty() ? "" : responses.back().session_id();
}

SessionClient::SessionClient(std::vector<std::string> extra_args, std::string models) {
  if (models.empty()) models = std::string(kLmDir) + "," + kMtDir;
  std::vector<std::string> args = {"--models", models, "--device", "cpu", "--threads", "1"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  server_ = StartServer(std::move(args));
  if (!server_->started()) return;
  channel_ = grpc::CreateChannel(server_->grpc_target(), grpc::InsecureChannelCredentials());
  stub_ = abcd::v1::Generator::NewStub(channel_);
  http_ = HttpClient(*server_, /*read_timeout_s=*/30);
}

abcd::v1::GenerateRequest SessionClient::Request(const std::vector<int32_t>& prompt,
                                                 const Sampling& sampling,
                                                 const std::string& session_id, int n,
                                                 int max_tokens) const {
  abcd::v1::GenerateRequest request;
  for (int32_t id : prompt) request.add_prompt_token_ids(id);
  request.set_max_tokens(max_tokens);
  request.mutable_sampling()->set_temperature(sampling.greedy ? 0.0f : 1.0f);
  if (!sampling.greedy) request.mutable_sampling()->set_seed(sampling.seed);
  request.set_session_id(session_id);
  request.set_n(n);
  return request;
}

GrpcTurn SessionClient::Generate(const abcd::v1::GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  GrpcTurn turn;
  auto reader = stub_->Generate(&context, request);
  abcd::v1::GenerateResponse response;
  while (reader->Read(&response)) turn.responses.push_back(response);
  turn.status = reader->Finish();
  return turn;
}

nlohmann::json SessionClient::Body(const std::vector<int32_t>& prompt, const Sampling& sampling,
                                   const std::string& session_id, int n, int max_tokens) const {
  nlohmann::json body = {
      {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", sampling.greedy ? 0.0 : 1.0}};
  if (!sampling.greedy) body["seed"] = sampling.seed;
  if (!session_id.empty()) body["session_id"] = session_id;
  if (n != 1) body["n"] = n;
  return body;
}

HttpTurn SessionClient::Complete(const nlohmann::json& body) {
  HttpTurn turn;
  auto response = http_->Post("/v1/completions", body.dump(), "application/json");
  if (!response) return turn;
  turn.status = response->status;
  if (!body.value("stream", false) || response->status != 200) {
    turn.body = nlohmann::json::parse(response->body, nullptr, false);
    return turn;
  }
  for (absl::string_view line : absl::StrSplit(response->body, '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      turn.done = true;
      continue;
    }
    turn.chunks.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return turn;
}

double SessionClient::Metric(const std::string& sample) { return MetricSample(*http_, sample); }

std::string HttpText(const HttpTurn& turn, int index) {
  std::string text;
  if (!turn.chunks.empty()) {
    for (const auto& chunk : turn.chunks) {
      if (!chunk.contains("choices")) continue;
      for (const auto& choice : chunk["choices"]) {
        if (choice.value("index", -1) == index) text += choice.value("text", "");
      }
    }
    return text;
  }
  if (!turn.body.contains("choices")) return text;
  for (const auto& choice : turn.body["choices"]) {
    if (choice.value("index", -1) == index) text += choice.value("text", "");
  }
  return text;
}

std::vector<int32_t> Tokens(int count, int salt) {
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) out.push_back(4 + (salt * 131 + i * 37) % 990);
  return out;
}

}  // namespace abcd::testing
