// Test clients for the session, n-way and prefix-cache e2e tests: one served abcd-server
// (started by StartServer, tests/e2e/server_suite.h) driven over gRPC and HTTP with token-id
// prompts.
// Not thread-safe except where noted: one test thread drives a client.
#pragma once

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/server_process.h"
#include "tests/testing/model_dirs.h"

namespace abcd::testing {

// What one Generate call returned.
struct GrpcTurn {
  grpc::Status status;
  std::vector<abcd::v1::GenerateResponse> responses;
  std::vector<int32_t> tokens(int index = 0) const;
  std::string first_session_id() const;
  std::string last_session_id() const;
  const abcd::v1::Usage& usage() const { return responses.back().usage(); }
};

// What one HTTP completion returned (the body, or the SSE chunks parsed).
struct HttpTurn {
  int status = 0;
  nlohmann::json body;                 // non-streaming, or the error
  std::vector<nlohmann::json> chunks;  // streaming: every data chunk but [DONE]
  bool done = false;                   // streaming: ended with [DONE]
};

// Sampling of a test turn: greedy (temperature 0) or seeded (temperature 1, seed).
struct Sampling {
  bool greedy = true;
  uint64_t seed = 0;
};

class SessionClient {
 public:
  // Starts abcd-server on `models` (default: the untrained LM and MT models) on the CPU with
  // `extra_args`.
  explicit SessionClient(std::vector<std::string> extra_args, std::string models = "");

  bool started() const { return server_->started(); }
  ServerProcess& server() { return *server_; }
  abcd::v1::Generator::Stub& stub() { return *stub_; }
  httplib::Client& http() { return *http_; }

  abcd::v1::GenerateRequest Request(const std::vector<int32_t>& prompt, const Sampling& sampling,
                                    const std::string& session_id = "", int n = 1,
                                    int max_tokens = 8) const;
  GrpcTurn Generate(const abcd::v1::GenerateRequest& request);

  nlohmann::json Body(const std::vector<int32_t>& prompt, const Sampling& sampling,
                      const std::string& session_id = "", int n = 1, int max_tokens = 8) const;
  HttpTurn Complete(const nlohmann::json& body);  // "stream" in the body picks SSE

  // The value of one exposition sample (exact name incl. labels), or -1.
  double Metric(const std::string& sample);

 private:
  std::unique_ptr<ServerProcess> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
  std::unique_ptr<httplib::Client> http_;
};

// The tokens of choice `index` of an HTTP turn (streaming or not) are not returned by the API
// (text only); tests compare texts over HTTP and token ids over gRPC.
std::string HttpText(const HttpTurn& turn, int index = 0);

// Prompt tokens that are valid ids of the untrained models (vocabulary 1000, 0..3 special).
std::vector<int32_t> Tokens(int count, int salt);

}  // namespace abcd::testing
