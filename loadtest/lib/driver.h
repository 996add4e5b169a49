// What a load-test client sends and what it records for every request, and the Driver interface
// each transport implements (gRPC Generate/Translate, HTTP /v1/completions SSE and
// /v1/translate, the in-process Executor).
//
// A Driver starts requests without blocking the caller and reports each one exactly once through
// its DoneCallback, which may run on any thread (a gRPC callback thread, an HTTP worker, the
// engine thread) and must only hand the record over. Timestamps are taken on the thread that
// sees the bytes arrive, with the monotonic clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace abcd::loadtest {

using Clock = std::chrono::steady_clock;

enum class Endpoint {
  kGrpcGenerate,     // abcd.v1.Generator/Generate, server streaming
  kGrpcTranslate,    // abcd.v1.Generator/Translate, unary
  kHttpCompletions,  // POST /v1/completions with "stream": true (server-sent events)
  kHttpTranslate,    // POST /v1/translate, one JSON answer
  kInProcess,        // Executor::Enqueue in this process (no network, no serialization)
};

absl::string_view EndpointName(Endpoint endpoint);
// Accepts the names EndpointName returns; false for anything else.
bool ParseEndpoint(absl::string_view name, Endpoint* endpoint);
// Generate-style endpoints stream tokens; translate endpoints answer once.
bool IsStreaming(Endpoint endpoint);

struct RequestSpec {
  int64_t index = 0;
  std::string prompt;     // text to continue, or the source text for translate endpoints
  int prompt_tokens = 0;  // client-side count (tokenizer); 0 when unknown
  int max_tokens = 16;
  float temperature = 0.0f;  // 0 = greedy
  uint64_t seed = 0;
  bool ignore_eos = false;  // HTTP and in-process only (the gRPC contract has no such field)
  std::string model;        // empty = the server's default model of the endpoint's kind
  int beam_size = 0;        // translate endpoints; 0 = server default
  double timeout_s = 600;   // client-side deadline
  // Sessions (generate endpoints): "new" asks for one, an id continues it; empty: none.
  std::string session_id;
};

struct RequestRecord {
  int64_t index = 0;
  bool ok = false;
  // "OK"; a gRPC code name ("RESOURCE_EXHAUSTED"); "HTTP 429"; "STREAM_ERROR" (an error event
  // inside a 200 SSE stream); "TRANSPORT" (no HTTP response); "CANCELLED" (client gave up).
  std::string status = "OK";
  std::string error;
  Clock::time_point arrival;  // when the schedule wanted it sent (open loop); = send otherwise
  Clock::time_point send;
  // Arrival of every response chunk that carried output; the first one is the first token.
  std::vector<Clock::time_point> chunk_times;
  std::vector<int> chunk_tokens;  // tokens in each chunk (1 per SSE event: text, not ids)
  Clock::time_point end;
  int prompt_tokens = 0;  // the server's usage when it sent one, else the client's count
  int output_tokens = 0;  // the server's usage when it sent one, else tokens counted
  std::string text;
  std::string session_id;  // the session the server named in its answer (sessions)
  int turn = -1;           // a conversation's turn (conversations.h); -1 outside one
};

using DoneCallback = std::function<void(RequestRecord record)>;

class Driver {
 public:
  virtual ~Driver() = default;
  // Starts one request and returns at once; `done` runs exactly once, on any thread.
  virtual void Start(const RequestSpec& spec, DoneCallback done) = 0;
  // Aborts every request still in flight (they finish with status CANCELLED). Thread-safe.
  virtual void CancelAll() = 0;
  virtual Endpoint endpoint() const = 0;
};

}  // namespace abcd::loadtest
