// Request-parser cases found by the fuzzers (tests/fuzz), pinned here so the main test run
// keeps them.
#include "server/http/request_parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "server/http/http_errors.h"

namespace abcd {
namespace {

// http_translate_fuzzer: with --max_tokens_limit below the default, a request that sent no
// max_tokens was handed to the executor with the default and refused naming max_tokens.
TEST(RequestParser, CompletionDefaults) {
  absl::StatusOr<http::CompletionRequest> request =
      http::ParseCompletionRequest(R"({"prompt": "hi", "unknown_field": {"x": 1}})", {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model, "");
  EXPECT_FALSE(request->stream);
  EXPECT_EQ(request->generation.max_tokens, 16);
  EXPECT_FLOAT_EQ(request->generation.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(request->generation.sampling.top_p, 1.0f);
  EXPECT_EQ(request->generation.sampling.top_k, 0);
  EXPECT_FALSE(request->generation.ignore_eos);

  request = http::ParseCompletionRequest(
      R"({"prompt": "hi", "max_tokens": null, "stop": "###", "ignore_eos": true, "n": 1})", {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->generation.max_tokens, 16);
  EXPECT_EQ(request->generation.stop, std::vector<std::string>{"###"});
  EXPECT_TRUE(request->generation.ignore_eos);
}

TEST(RequestParser, MaxTokensLimitComesFromOptions) {
  http::ParseLimits limits;
  limits.max_tokens_limit = 32;
  absl::StatusOr<http::CompletionRequest> request =
      http::ParseCompletionRequest(R"({"prompt": "hi", "max_tokens": 33})", limits);
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(request.status().message(), "max_tokens must be an integer in [1, 32], got 33");
}

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

// Issue 26: OpenAI's remaining sampling fields reach the engine's SamplingParams; bad values
// are refused naming the field (OpenAI's param).
TEST(RequestParser, MinPPenaltiesAndLogitBias) {
  http::ParseLimits limits;
  absl::StatusOr<http::CompletionRequest> request = http::ParseCompletionRequest(
      R"({"prompt": "hi", "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -1.5,
          "logit_bias": {"50256": -100, "7": 2.5}})",
      limits);
  ASSERT_TRUE(request.ok()) << request.status();
  const SamplingParams& s = request->generation.sampling;
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -1.5f);
  std::vector<std::pair<int32_t, float>> bias = s.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));
  request = http::ParseCompletionRequest(R"({"prompt": "hi", "logit_bias": null})", limits);
  ASSERT_TRUE(request.ok());
  EXPECT_TRUE(request->generation.sampling.logit_bias.empty());

  const std::pair<const char*, const char*> bad[] = {
      {R"({"prompt": "hi", "min_p": 1.5})", "min_p must be in [0, 1], got 1.5"},
      {R"({"prompt": "hi", "min_p": "0.1"})", "min_p must be a number"},
      {R"({"prompt": "hi", "presence_penalty": 2.5})", "presence_penalty must be in [-2, 2]"},
      {R"({"prompt": "hi", "frequency_penalty": -3})", "frequency_penalty must be in [-2, 2]"},
      {R"({"prompt": "hi", "logit_bias": [1]})", "logit_bias must be an object"},
      {R"({"prompt": "hi", "logit_bias": {"x": 1}})", "logit_bias must be keyed by token ids"},
      {R"({"prompt": "hi", "logit_bias": {"-1": 1}})", "logit_bias must be keyed by token ids"},
      {R"({"prompt": "hi", "logit_bias": {"5": "1"}})", "logit_bias[5] must be a number"},
      {R"({"prompt": "hi", "logit_bias": {"5": 101}})", "logit_bias[5] must be in [-100, 100]"},
  };
  for (const auto& [body, message] : bad) {
    const absl::Status status = http::ParseCompletionRequest(body, limits).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(status.message().find(message), std::string::npos) << body << " -> " << status;
    const std::string field(message, std::string(message).find(' '));  // the path
    EXPECT_EQ(http::ParamFromMessage(status.message()), field) << status;
  }
}

// Issue 26: max_tokens 0 is allowed only to score a prompt (echo with logprobs); the error
// says so instead of only the range.
// Issue 27: "speculative": {"mode": "ngram" | "off", "k": 1..16}; errors name the field.
TEST(RequestParser, SpeculativeModeAndK) {
  http::ParseLimits limits;
  absl::StatusOr<http::CompletionRequest> request = http::ParseCompletionRequest(
      R"({"prompt": "hi", "speculative": {"mode": "ngram", "k": 6}})", limits);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_TRUE(request->generation.speculative.has_value());
  EXPECT_EQ(request->generation.speculative->mode, SpeculativeMode::kNgram);
  EXPECT_EQ(request->generation.speculative->k, 6);
  request =
      http::ParseCompletionRequest(R"({"prompt": "hi", "speculative": {"mode": "ngram"}})", limits);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->generation.speculative->k, 4);
  request =
      http::ParseCompletionRequest(R"({"prompt": "hi", "speculative": {"mode": "off"}})", limits);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->generation.speculative->enabled());
  request = http::ParseCompletionRequest(R"({"prompt": "hi"})", limits);
  EXPECT_FALSE(request->generation.speculative.has_value());  // the server's default
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"({"mode": "ngram", "k": 0})", "speculative.k must be an integer in [1, 16], got 0"},
      {R"({"mode": "ngram", "k": 17})", "speculative.k must be an integer in [1, 16], got 17"},
      {R"({"mode": "ngram", "k": 2.5})", "speculative.k must be an integer"},
      {R"({"mode": "eagle"})", "speculative.mode must be \"ngram\" or \"off\""},
      {R"({"k": 4})", "speculative.mode is required"},
      {R"("ngram")", "speculative must be an object"},
  };
  for (const auto& [value, message] : bad) {
    const absl::Status status =
        http::ParseCompletionRequest(
            std::string(R"({"prompt": "hi", "speculative": )") + value + "}", limits)
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_NE(status.message().find(message), std::string::npos) << status;
  }
}

TEST(RequestParser, MaxTokensZeroSaysWhenItIsAllowed) {
  http::ParseLimits limits;
  const absl::Status zero =
      http::ParseCompletionRequest(R"({"prompt": "x", "max_tokens": 0})", limits).status();
  EXPECT_EQ(zero.message(),
            "max_tokens must be an integer in [1, 4096], got 0 (0 only with echo and logprobs: "
            "the prompt is scored)");
  EXPECT_EQ(http::ParamFromMessage(zero.message()), "max_tokens");
  EXPECT_TRUE(http::ParseCompletionRequest(
                  R"({"prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 0})", limits)
                  .ok());
  const absl::Status scored =
      http::ParseCompletionRequest(
          R"({"prompt": "x", "max_tokens": -1, "echo": true, "logprobs": 0})", limits)
          .status();
  EXPECT_EQ(scored.message(), "max_tokens must be an integer in [0, 4096], got -1");
}

// Session errors on the HTTP wire (server/README.md): busy 409, unknown 404, foreign blob
// 412, store down 503; the param is the field the message starts with.
// Issue 26 item 3: response_format at the door; the schema keeps the body's key order.
TEST(RequestParser, ResponseFormat) {
  http::ParseLimits limits;
  auto parse = [&](const std::string& format) {
    return http::ParseCompletionRequest(R"({"prompt": "hi", "response_format": )" + format + "}",
                                        limits);
  };
  ASSERT_TRUE(parse(R"({"type": "text"})").ok());
  EXPECT_EQ(parse(R"({"type": "text"})")->generation.response_format, nullptr);
  EXPECT_EQ(parse(R"({"type": "json_object"})")->generation.response_format,
            JsonGrammar::AnyObject());
  absl::StatusOr<http::CompletionRequest> schema = parse(
      R"({"type": "json_schema", "json_schema": {"name": "p", "strict": true, "schema":
          {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "string"}},
           "required": ["z", "a"]}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  ASSERT_NE(schema->generation.response_format, nullptr);
  JsonMatcher ordered(schema->generation.response_format.get());
  EXPECT_TRUE(ordered.Advance(R"({"z":1,"a":"x"})") && ordered.complete());
  JsonMatcher reordered(schema->generation.response_format.get());
  EXPECT_FALSE(reordered.Advance(R"({"a":"x","z":1})"));

  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"("json")",
       "response_format must be an object ({\"type\": \"json_object\"}), got \"json\""},
      {R"({"type": "grammar"})",
       "response_format.type must be one of \"text\", \"json_object\", \"json_schema\", got "
       "\"grammar\""},
      {R"({"type": "json_schema"})",
       "response_format.json_schema must be an object with a schema for type json_schema"},
      {R"({"type": "json_schema", "json_schema": {"name": "x"}})",
       "response_format.json_schema.schema is required"},
      {R"({"type": "json_schema", "json_schema": {"strict": 1, "schema": {}}})",
       "response_format.json_schema.strict must be a boolean, got 1"},
      {R"({"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties":
          {"name": {"type": "string", "contentMediaType": "text/plain"}}}}})",
       "response_format.json_schema.schema.properties.name.contentMediaType is not supported"},
  };
  for (const auto& [format, message] : refused) {
    absl::StatusOr<http::CompletionRequest> request = parse(format);
    ASSERT_FALSE(request.ok()) << format;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(request.status().message(), message);
  }
}

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
