// Request-parser cases found by the fuzzers (tests/fuzz), pinned here so the main test run
// keeps them.
#include "server/http/request_parser.h"

#include <gtest/gtest.h>

#include "server/http/http_errors.h"

namespace abcd {
namespace {

// http_translate_fuzzer: with --max_tokens_limit below the default, a request that sent no
// max_tokens was handed to the executor with the default and refused naming max_tokens.
TEST(RequestParser, DefaultMaxTokensNeverExceedsTheLimit) {
  http::ParseLimits limits;
  limits.max_tokens_limit = 8;
  absl::StatusOr<http::CompletionRequest> completion =
      http::ParseCompletionRequest(R"({"prompt": "hi"})", limits);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->generation.max_tokens, 8);
  absl::StatusOr<http::TranslateRequest> translation =
      http::ParseTranslateRequest(R"({"text": "Hello."})", limits);
  ASSERT_TRUE(translation.ok()) << translation.status();
  EXPECT_EQ(translation->max_tokens, 8);

  limits.max_tokens_limit = 4096;  // the defaults themselves when they fit
  EXPECT_EQ(http::ParseCompletionRequest(R"({"prompt": "hi"})", limits)->generation.max_tokens, 16);
  EXPECT_EQ(http::ParseTranslateRequest(R"({"text": "Hello."})", limits)->max_tokens, 128);
}

// Issue 14: token-id prompts, n and session_id at the door.
TEST(RequestParser, TokenIdPromptsNAndSessionId) {
  http::ParseLimits limits;
  limits.max_prompt_tokens = 4;
  limits.max_choices = 3;
  absl::StatusOr<http::CompletionRequest> request =
      http::ParseCompletionRequest(R"({"prompt": [5, 6, 7], "n": 3, "session_id": null})", limits);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->generation.prompt_token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(request->generation.prompt.empty());
  EXPECT_EQ(request->generation.n, 3);
  EXPECT_TRUE(request->session_id.empty());

  request = http::ParseCompletionRequest(R"({"prompt": ["one"], "session_id": "new"})", limits);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->generation.prompt, "one");
  EXPECT_EQ(request->generation.n, 1);
  EXPECT_EQ(request->session_id, "new");

  const absl::Status too_long =
      http::ParseCompletionRequest(R"({"prompt": [5, 6, 7, 8, 9]})", limits).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("more than the limit of 4"), std::string::npos) << too_long;
  const absl::Status two_strings =
      http::ParseCompletionRequest(R"({"prompt": ["a", "b"]})", limits).status();
  EXPECT_NE(two_strings.message().find("exactly one string"), std::string::npos) << two_strings;
  EXPECT_EQ(http::ParseCompletionRequest(R"({"prompt": [5], "n": 4})", limits).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(http::ParseCompletionRequest(R"({"prompt": [5], "n": 2, "session_id": "new"})", limits)
                .status()
                .message(),
            "n: must be 1 with a session");
}

// Session errors on the HTTP wire (server/README.md): busy 409, unknown 404, foreign blob
// 412, store down 503; the param is the field the message starts with.
TEST(HttpErrors, SessionStatusesAndParams) {
  EXPECT_EQ(http::MapStatusCode(absl::StatusCode::kAborted).http_status, 409);
  EXPECT_EQ(http::MapStatusCode(absl::StatusCode::kAborted).label, "aborted");
  EXPECT_EQ(http::MapStatusCode(absl::StatusCode::kFailedPrecondition).http_status, 412);
  EXPECT_EQ(http::MapStatusCode(absl::StatusCode::kNotFound).http_status, 404);
  EXPECT_EQ(http::MapStatusCode(absl::StatusCode::kUnavailable).http_status, 503);
  EXPECT_EQ(http::ParamFromMessage("n: must be 1 with a session"), "n");
  EXPECT_EQ(http::ParamFromMessage("session_id: sessions need a decoder-only model"), "session_id");
  EXPECT_EQ(http::ParamFromMessage("state: the session blob is empty"), "state");
  EXPECT_EQ(http::ParamFromMessage("session 0123 is in use by another request"), "");
}

// Issue 28: a number beyond a double's range is named by its field, not "not valid JSON".
TEST(RequestParser, OutOfRangeNumbersNameTheirField) {
  const http::ParseLimits limits;
  const auto message = [&](const std::string& body) {
    return std::string(http::ParseCompletionRequest(body, limits).status().message());
  };
  EXPECT_EQ(message(R"({"prompt": "hi", "max_tokens": 1e400})"),
            "max_tokens must be a number within the range of a double, got 1e400");
  EXPECT_EQ(message(R"({"prompt": "hi", "temperature": -1E+999})").rfind("temperature must", 0),
            0u);
  EXPECT_EQ(message(R"({"stream_options": {"include_usage": 1e400}, "prompt": "x"})")
                .rfind("stream_options.include_usage must be a number", 0),
            0u);
  EXPECT_EQ(message(R"({"prompt": [1, 2, 1e400]})").rfind("prompt[2] must be a number", 0), 0u);
  EXPECT_EQ(message("1e400").rfind("request body must be a number", 0), 0u);
  EXPECT_EQ(http::ParseTranslateRequest(R"({"text": "a", "beam_size": 1e999})", limits)
                .status()
                .message()
                .rfind("beam_size must be", 0),
            0u);
  // Other syntax errors still say the body is not JSON, with where.
  EXPECT_EQ(message(R"({"prompt": "hi",})").rfind("request body is not valid JSON (at byte", 0),
            0u);
}

}  // namespace
}  // namespace abcd
