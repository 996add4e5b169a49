// Request-parser cases found by the fuzzers (tests/fuzz), pinned here so the main test run
// keeps them.
#include "server/http/request_parser.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace abcd
