// libFuzzer target: the gRPC request path that runs before an Executor, without a server: the
// bytes are parsed as the abcd.v1 message (as gRPC does on arrival) and converted
// (server/grpc/request_conversion.h). Built twice: grpc_generate_fuzzer (GenerateRequest) and
// grpc_translate_fuzzer (ABCD_FUZZ_TRANSLATE, TranslateRequest). A converted request must have
// the defaults applied and nothing negative left in it (token ids included).
#include <cstddef>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "engine/sampling/sampler.h"
#include "google/protobuf/stubs/logging.h"
#include "server/grpc/request_conversion.h"
#include "tests/fuzz/fuzz_check.h"

// Protobuf logs one ERROR line per string field with invalid UTF-8; silence it (it is the parse
// result that matters here, and the log would slow the run down).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  const absl::Time deadline = absl::UnixEpoch() + absl::Seconds(1);
#ifdef ABCD_FUZZ_TRANSLATE
  abcd::v1::TranslateRequest message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<abcd::GenerationRequest> request = abcd::ToTranslationRequest(message, deadline);
  if (!request.ok()) {
    ABCD_FUZZ_CHECK(request.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(message.beam_size() < 0 || message.max_tokens() < 0);
    return 0;
  }
  ABCD_FUZZ_CHECK(request->source == message.text() && request->prompt.empty());
  ABCD_FUZZ_CHECK(request->beam_size >= 1 && request->max_tokens >= 1);
  ABCD_FUZZ_CHECK(request->sampling.temperature == 0.0f);
  ABCD_FUZZ_CHECK(abcd::ValidateSamplingParams(request->sampling).ok());
#else
  abcd::v1::GenerateRequest message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<abcd::GenerationRequest> request = abcd::ToGenerationRequest(message, deadline);
  bool negative_id = false;
  for (int32_t id : message.prompt_token_ids()) negative_id |= id < 0;
  const bool bad_ids =
      !message.prompt_token_ids().empty() && (negative_id || !message.prompt().empty());
  // messages exclude the other prompts and sessions; add_generation_prompt needs messages.
  const bool bad_messages = message.messages().empty() ? message.has_add_generation_prompt()
                                                       : !message.prompt().empty() ||
                                                             !message.prompt_token_ids().empty() ||
                                                             !message.session_id().empty();
  // speculative: mode "ngram" (k unset or in [1, 16]) or "off".
  const abcd::v1::SpeculativeDecoding& speculative = message.speculative();
  const bool bad_speculative =
      message.has_speculative() &&
      (speculative.mode() == "ngram"
           ? speculative.has_k() && (speculative.k() < 1 || speculative.k() > 16)
           : speculative.mode() != "off");
  // response_format: a schema that is not JSON text or uses an unsupported keyword, a schema
  // without TYPE_JSON_SCHEMA or an unknown type is refused naming the field.
  const bool refused_format = message.has_response_format() &&
                              absl::StartsWith(request.status().message(), "response_format");
  if (!request.ok()) {
    ABCD_FUZZ_CHECK(request.status().code() == absl::StatusCode::kInvalidArgument);
    ABCD_FUZZ_CHECK(message.max_tokens() < 0 || message.n() < 0 || bad_ids || bad_messages ||
                    bad_speculative || refused_format ||
                    (message.n() > 1 && !message.session_id().empty()));
    return 0;
  }
  ABCD_FUZZ_CHECK((request->response_format != nullptr) ==
                  (message.response_format().type() != abcd::v1::ResponseFormat::TYPE_TEXT));
  ABCD_FUZZ_CHECK(!bad_messages && !bad_speculative);
  ABCD_FUZZ_CHECK(request->speculative.has_value() == message.has_speculative());
  ABCD_FUZZ_CHECK(request->prompt == message.prompt() && request->source.empty());
  ABCD_FUZZ_CHECK(request->prompt_token_ids.size() ==
                  static_cast<size_t>(message.prompt_token_ids_size()));
  ABCD_FUZZ_CHECK(request->max_tokens >= 1 && request->n >= 1);
  ABCD_FUZZ_CHECK(request->stop.size() == static_cast<size_t>(message.stop_size()));
  // The executor's own sampling check (run at Enqueue) must refuse, not crash, on any value.
  const absl::Status sampling = abcd::ValidateSamplingParams(request->sampling);
  ABCD_FUZZ_CHECK(sampling.ok() || sampling.code() == absl::StatusCode::kInvalidArgument);
#endif
  ABCD_FUZZ_CHECK(request->deadline == deadline);
  return 0;
}
