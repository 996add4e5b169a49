// abcd.v1 request messages -> engine requests: the field checks the gRPC frontend makes before a
// request reaches an Executor (which validates sampling and token limits itself). Moved out of
// generator_service.cc so that the conversion can be fuzzed without a server
// (tests/fuzz/grpc_request_fuzzer.cc).
//
// Thread-safety: pure functions.
#pragma once

#include "abcd/v1/generator.pb.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/scheduler/executor.h"

namespace abcd {

// Generate: max_tokens 0 means the default (16), negative is INVALID_ARGUMENT naming it; the
// sampling fields that are present are copied. prompt_token_ids (each >= 0; the executor checks
// the vocabulary) replace prompt, which must then be empty; n 0 means 1, and n > 1 with a
// session_id is INVALID_ARGUMENT. session_id itself is the caller's (sessions need a store).
// messages exclude prompt, prompt_token_ids and session_id (INVALID_ARGUMENT naming them); the
// caller renders them into prompt_token_ids (server/chat/chat_prompt.h). response_format:
// TYPE_JSON_OBJECT or TYPE_JSON_SCHEMA with json_schema (JSON text) compiled to
// GenerationRequest::response_format (INVALID_ARGUMENT naming the schema's path).
absl::StatusOr<GenerationRequest> ToGenerationRequest(const abcd::v1::GenerateRequest& in,
                                                      absl::Time deadline);

// Translate: beam_size 0 means 4, max_tokens 0 means 128, negative is INVALID_ARGUMENT naming
// the field; greedy within the beam (temperature 0).
absl::StatusOr<GenerationRequest> ToTranslationRequest(const abcd::v1::TranslateRequest& in,
                                                       absl::Time deadline);

}  // namespace abcd
