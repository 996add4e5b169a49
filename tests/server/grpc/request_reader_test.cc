// request_reader: a raw Generate/Translate request is scanned before it is parsed: invalid
// UTF-8 names the field (repeated ones by index), a size limit refuses a field from its length
// prefix alone, and bytes that are not a message are refused, never crash.
#include "server/grpc/request_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "abcd/v1/generator.pb.h"
#include "server/grpc/request_conversion.h"

namespace abcd {
namespace {

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// GenerateRequest bytes; protobuf's C++ serializer writes invalid UTF-8 as given.
std::string Serialized(const abcd::v1::GenerateRequest& request) {
  std::string out;
  EXPECT_TRUE(request.SerializeToString(&out));
  return out;
}

TEST(RequestReader, ValidRequestParses) {
  abcd::v1::GenerateRequest in;
  in.set_model("abc-lm");
  in.set_prompt("Grüße 🙂");
  in.add_stop("END");
  in.set_max_tokens(7);
  in.mutable_sampling()->set_temperature(0.5f);
  abcd::v1::GenerateRequest out;
  ASSERT_EQ(ReadRequest(Buffer(Serialized(in)), nullptr, &out), absl::OkStatus());
  EXPECT_EQ(out.prompt(), in.prompt());
  EXPECT_EQ(out.max_tokens(), 7);
  EXPECT_EQ(out.stop(0), "END");
  EXPECT_FLOAT_EQ(out.sampling().temperature(), 0.5f);
}

// Issue 26: the OpenAI sampling fields travel from the proto to the engine's SamplingParams
// (logit_bias sorted by id, so a request always samples the same way).
TEST(RequestConversion, MinPPenaltiesAndLogitBias) {
  abcd::v1::GenerateRequest in;
  in.set_prompt("hi");
  abcd::v1::SamplingParams* sampling = in.mutable_sampling();
  sampling->set_min_p(0.1f);
  sampling->set_presence_penalty(0.5f);
  sampling->set_frequency_penalty(-0.25f);
  (*sampling->mutable_logit_bias())[42] = -100.0f;
  (*sampling->mutable_logit_bias())[7] = 3.0f;
  absl::StatusOr<GenerationRequest> out = ToGenerationRequest(in, absl::InfiniteFuture());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FLOAT_EQ(out->sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(out->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(out->sampling.frequency_penalty, -0.25f);
  EXPECT_EQ(out->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{7, 3.0f}, {42, -100.0f}}));
  // Unset: the engine's defaults.
  out = ToGenerationRequest(abcd::v1::GenerateRequest(), absl::InfiniteFuture());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->sampling.min_p, 0.0f);
  EXPECT_EQ(out->sampling.presence_penalty, 0.0f);
  EXPECT_TRUE(out->sampling.logit_bias.empty());
}

// Issue 27: GenerateRequest.speculative (field 11): unset is the server's default; mode and k
// are checked, errors naming the field.
TEST(RequestConversion, SpeculativeDecoding) {
  abcd::v1::GenerateRequest in;
  in.set_prompt("hi");
  absl::StatusOr<GenerationRequest> out = ToGenerationRequest(in, absl::InfiniteFuture());
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->speculative.has_value());
  in.mutable_speculative()->set_mode("ngram");
  out = ToGenerationRequest(in, absl::InfiniteFuture());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->speculative->enabled());
  EXPECT_EQ(out->speculative->k, 4);
  in.mutable_speculative()->set_k(16);
  EXPECT_EQ(ToGenerationRequest(in, absl::InfiniteFuture())->speculative->k, 16);
  in.mutable_speculative()->set_k(17);
  EXPECT_EQ(ToGenerationRequest(in, absl::InfiniteFuture()).status(),
            absl::InvalidArgumentError("speculative.k must be in [1, 16], got 17"));
  in.mutable_speculative()->set_mode("draft-model");
  EXPECT_EQ(ToGenerationRequest(in, absl::InfiniteFuture()).status(),
            absl::InvalidArgumentError(
                "speculative.mode must be \"ngram\" or \"off\", got \"draft-model\""));
  in.mutable_speculative()->set_mode("off");
  EXPECT_FALSE(ToGenerationRequest(in, absl::InfiniteFuture())->speculative->enabled());
}

// messages (a conversation the service renders) exclude prompt, prompt_token_ids and sessions.
TEST(RequestConversion, MessagesAreOneOfThePromptsAndNeedNoSession) {
  abcd::v1::GenerateRequest in;
  abcd::v1::ChatMessage* message = in.add_messages();
  message->set_role("user");
  message->set_content("Hi");
  EXPECT_TRUE(ToGenerationRequest(in, absl::InfiniteFuture()).ok());
  abcd::v1::GenerateRequest both = in;
  both.set_prompt("x");
  EXPECT_EQ(
      ToGenerationRequest(both, absl::InfiniteFuture()).status(),
      absl::InvalidArgumentError("messages must be empty when prompt is given (one or the other)"));
  both.clear_prompt();
  both.add_prompt_token_ids(5);
  EXPECT_EQ(ToGenerationRequest(both, absl::InfiniteFuture()).status(),
            absl::InvalidArgumentError(
                "messages must be empty when prompt_token_ids is given (one or the other)"));
  abcd::v1::GenerateRequest session = in;
  session.set_session_id("new");
  EXPECT_EQ(ToGenerationRequest(session, absl::InfiniteFuture()).status(),
            absl::InvalidArgumentError("session_id is not supported with messages"));
  abcd::v1::GenerateRequest text;
  text.set_prompt("x");
  text.set_add_generation_prompt(false);
  EXPECT_EQ(ToGenerationRequest(text, absl::InfiniteFuture()).status(),
            absl::InvalidArgumentError("add_generation_prompt needs messages"));
  // A message's content that is not UTF-8 is named with its index.
  in.add_messages()->set_content("\xc3\x28");
  abcd::v1::GenerateRequest out;
  EXPECT_EQ(ReadRequest(Buffer(Serialized(in)), nullptr, &out),
            absl::InvalidArgumentError("messages[1].content is not valid UTF-8"));
}

TEST(RequestReader, InvalidUtf8NamesTheField) {
  abcd::v1::GenerateRequest in;
  in.set_prompt("fine");
  in.add_stop("ok");
  in.add_stop("\xc3\x28");
  abcd::v1::GenerateRequest out;
  absl::Status status = ReadRequest(Buffer(Serialized(in)), nullptr, &out);
  EXPECT_EQ(status, absl::InvalidArgumentError("stop[1] is not valid UTF-8"));
  in.clear_stop();
  in.set_model("\xff");
  status = ReadRequest(Buffer(Serialized(in)), nullptr, &out);
  EXPECT_EQ(status, absl::InvalidArgumentError("model is not valid UTF-8"));
}

// Fields are found through the descriptor, nested and repeated messages included.
TEST(RequestReader, NestedStringsAreNamedByPath) {
  abcd::v1::ListModelsResponse in;
  in.add_models()->set_name("fine");
  abcd::v1::ModelInfo* second = in.add_models();
  second->set_name("also fine");
  second->set_kind("\xed\xa0\x80");  // a UTF-16 surrogate: not UTF-8
  std::string bytes;
  ASSERT_TRUE(in.SerializeToString(&bytes));
  abcd::v1::ListModelsResponse out;
  EXPECT_EQ(ReadRequest(Buffer(bytes), nullptr, &out),
            absl::InvalidArgumentError("models[1].kind is not valid UTF-8"));
}

TEST(RequestReader, SizeCheckRefusesFromTheLengthPrefix) {
  abcd::v1::GenerateRequest in;
  in.set_prompt(std::string(1000, 'x'));
  std::string bytes = Serialized(in);
  // Cut the message short: the prompt's bytes are not all there, but its length prefix is, and
  // the size check answers from it without reading further.
  bytes.resize(10);
  std::vector<std::pair<std::string, size_t>> seen;
  const FieldSizeCheck check = [&](absl::string_view name, size_t size) {
    seen.emplace_back(std::string(name), size);
    return size > 100 ? absl::InvalidArgumentError("too long") : absl::OkStatus();
  };
  abcd::v1::GenerateRequest out;
  EXPECT_EQ(ReadRequest(Buffer(bytes), check, &out), absl::InvalidArgumentError("too long"));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(std::string("prompt"), size_t{1000}));
}

// prompt_token_ids are counted while scanning, packed or not, and refused before they are
// copied; a message cut inside the packed run still reports the count so far.
TEST(RequestReader, CountCheckBoundsRepeatedNumbers) {
  abcd::v1::GenerateRequest in;
  for (int i = 0; i < 1000; ++i) in.add_prompt_token_ids(i);
  const std::string bytes = Serialized(in);
  int64_t largest = 0;
  const FieldCountCheck check = [&](absl::string_view name, int64_t count) {
    EXPECT_EQ(name, "prompt_token_ids");
    largest = std::max(largest, count);
    return count > 600 ? absl::InvalidArgumentError("too many") : absl::OkStatus();
  };
  abcd::v1::GenerateRequest out;
  EXPECT_EQ(ReadRequest(Buffer(bytes), nullptr, &out, check),
            absl::InvalidArgumentError("too many"));
  EXPECT_LE(largest, 1000);
  EXPECT_EQ(out.prompt_token_ids_size(), 0);  // refused before parsing

  // Unpacked elements (a tag each) are counted too.
  std::string unpacked;
  for (int i = 0; i < 700; ++i) unpacked += std::string{static_cast<char>(8 * 8), 5};
  EXPECT_EQ(ReadRequest(Buffer(unpacked), nullptr, &out, check),
            absl::InvalidArgumentError("too many"));

  in.clear_prompt_token_ids();
  largest = 0;
  for (int i = 0; i < 10; ++i) in.add_prompt_token_ids(-i);  // negative: 10-byte varints
  ASSERT_EQ(ReadRequest(Buffer(Serialized(in)), nullptr, &out, check), absl::OkStatus());
  EXPECT_EQ(largest, 10);
  EXPECT_EQ(out.prompt_token_ids_size(), 10);
}

TEST(RequestReader, GarbageIsRefused) {
  abcd::v1::GenerateRequest out;
  const std::vector<std::vector<unsigned char>> cases = {
      {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f},  // prompt longer than the message
      {0x12, 0x05, 'a', 'b'},                // prompt cut short
      {0xff, 0xff, 0xff},                    // not a tag
      {0x0a, 0x80}};                         // truncated length varint
  for (const auto& raw : cases) {
    const std::string bytes(raw.begin(), raw.end());
    const absl::Status status = ReadRequest(Buffer(bytes), nullptr, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(status.message(), "request is not a valid abcd.v1.GenerateRequest");
  }
  EXPECT_EQ(ReadRequest(grpc::ByteBuffer(), nullptr, &out), absl::OkStatus());  // empty
}

}  // namespace
}  // namespace abcd
