// libFuzzer target: the HTTP/JSON request parser (server/http/request_parser.h) on arbitrary
// bodies. Built twice: http_completion_fuzzer (POST /v1/completions) and http_translate_fuzzer
// (ABCD_FUZZ_TRANSLATE, POST /v1/translate). An accepted body must satisfy the limits it was
// parsed with; a refused one must be INVALID_ARGUMENT with a message.
#include <cstddef>
#include <cstdint>

#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "server/http/request_parser.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void CheckRefusal(const absl::Status& status) {
  ABCD_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  ABCD_FUZZ_CHECK(!status.message().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  abcd::http::ParseLimits limits;
  limits.max_tokens_limit = 64;
  limits.max_batch_texts = 4;
  limits.max_beam_size = 4;
  limits.max_stop_strings = 3;
#ifdef ABCD_FUZZ_TRANSLATE
  absl::StatusOr<abcd::http::TranslateRequest> request =
      abcd::http::ParseTranslateRequest(body, limits);
  if (!request.ok()) {
    CheckRefusal(request.status());
    return 0;
  }
  ABCD_FUZZ_CHECK(!request->texts.empty());
  ABCD_FUZZ_CHECK(request->texts.size() <= static_cast<size_t>(limits.max_batch_texts));
  ABCD_FUZZ_CHECK(request->batch || request->texts.size() == 1);
  for (const std::string& text : request->texts) ABCD_FUZZ_CHECK(!text.empty());
  ABCD_FUZZ_CHECK(request->beam_size >= 1 && request->beam_size <= limits.max_beam_size);
  ABCD_FUZZ_CHECK(request->max_tokens >= 1 && request->max_tokens <= limits.max_tokens_limit);
#else
  absl::StatusOr<abcd::http::CompletionRequest> request =
      abcd::http::ParseCompletionRequest(body, limits);
  if (!request.ok()) {
    CheckRefusal(request.status());
    return 0;
  }
  const abcd::GenerationRequest& g = request->generation;
  // Text or token ids, one of them; ids non-negative and at most max_prompt_tokens of them.
  ABCD_FUZZ_CHECK(g.prompt.empty() != g.prompt_token_ids.empty());
  ABCD_FUZZ_CHECK(g.prompt_token_ids.size() <= static_cast<size_t>(limits.max_prompt_tokens));
  for (int32_t id : g.prompt_token_ids) ABCD_FUZZ_CHECK(id >= 0);
  ABCD_FUZZ_CHECK(g.n >= 1 && g.n <= limits.max_choices);
  ABCD_FUZZ_CHECK(request->session_id.empty() || g.n == 1);
  // max_tokens 0 only scores the prompt: echo with logprobs, one choice, no session.
  ABCD_FUZZ_CHECK(g.max_tokens >= (g.prompt_logprobs ? 0 : 1) &&
                  g.max_tokens <= limits.max_tokens_limit);
  ABCD_FUZZ_CHECK(g.logprobs >= -1 && g.logprobs <= abcd::kMaxTopLogprobs);
  ABCD_FUZZ_CHECK(g.prompt_logprobs == (request->echo && g.logprobs >= 0));
  ABCD_FUZZ_CHECK(!request->echo || (g.n == 1 && request->session_id.empty()));
  ABCD_FUZZ_CHECK(!request->include_usage || request->stream);
  ABCD_FUZZ_CHECK(g.stop.size() <= static_cast<size_t>(limits.max_stop_strings));
  for (const std::string& stop : g.stop) ABCD_FUZZ_CHECK(!stop.empty());
  // What the executor checks again at Enqueue: the door must not let through what it refuses.
  ABCD_FUZZ_CHECK(abcd::ValidateSamplingParams(g.sampling).ok());
  ABCD_FUZZ_CHECK(!g.speculative.has_value() ||
                  abcd::ValidateSpeculativeParams(*g.speculative, "speculative").ok());
#endif
  return 0;
}
