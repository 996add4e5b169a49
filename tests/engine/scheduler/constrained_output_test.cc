// Constrained JSON output through the Executor on the trained abc-lm (an English LM that
// writes no JSON of its own): with response_format every choice's text parses and has the
// schema's shape (greedy and sampled, n = 2, with unconstrained requests in the same batch),
// ends with "stop" when the value completes and "length" when max_tokens cuts it; without it
// the same requests give no JSON (so the checks can fail); unconstrained requests are not
// changed by constrained ones beside them.
#include <gtest/gtest.h>

#include "engine/scheduler/executor.h"
#include "nlohmann/json.hpp"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::ChoiceOutput;
using testing::ChoiceOutputs;
using testing::Collector;
using testing::kTrainedLmDir;

class ConstrainedOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto model = Model::Load(kTrainedLmDir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    auto tokenizer = Tokenizer::Load(kTrainedLmDir + "/tokenizer.model");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    ExecutorOptions options;
    options.model_name = "abc-lm";
    auto executor = Executor::Create(*model_, *tokenizer_, options);
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = executor->release();
  }
  static void TearDownTestSuite() {
    delete executor_;
    delete tokenizer_;
    delete model_;
  }

  // The request's choices: each must have finished, with an OK status.
  static std::vector<ChoiceOutput> Run(const GenerationRequest& request) {
    Collector collector;
    absl::StatusOr<RequestId> id = executor_->Enqueue(request, collector.Callback());
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return {};
    std::vector<ChoiceOutput> choices = ChoiceOutputs(collector.Wait(), request.n);
    for (const ChoiceOutput& choice : choices) {
      EXPECT_TRUE(choice.finished);
      EXPECT_TRUE(choice.status.ok()) << choice.status;
    }
    return choices;
  }

  static inline Model* model_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
  static inline Executor* executor_ = nullptr;
};

const char kSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "colour": {"enum": ["red", "green", "blue"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "ok": {"type": "boolean"}},
  "required": ["name", "age", "colour", "tags", "ok"], "additionalProperties": false})";

// The value's shape: kSchema's properties, all present, with their types.
bool HasShape(const nlohmann::json& v) {
  if (!v.is_object() || v.size() != 5) return false;
  if (!v["name"].is_string() || !v["age"].is_number_integer() || !v["ok"].is_boolean()) {
    return false;
  }
  const std::string colour = v["colour"].is_string() ? v["colour"].get<std::string>() : "";
  if (colour != "red" && colour != "green" && colour != "blue") return false;
  if (!v["tags"].is_array() || v["tags"].size() > 3) return false;
  for (const auto& tag : v["tags"]) {
    if (!tag.is_string()) return false;
  }
  return true;
}

GenerationRequest SchemaRequest(float temperature, uint64_t seed) {
  GenerationRequest request;
  request.prompt = "The record of the person reads";
  request.max_tokens = 400;
  request.sampling.temperature = temperature;
  request.sampling.seed = seed;
  auto grammar = JsonGrammar::FromSchema(nlohmann::ordered_json::parse(kSchema), "schema");
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  request.response_format = *grammar;
  return request;
}

TEST_F(ConstrainedOutputTest, EveryChoiceParsesAndHasTheSchemasShape) {
  int completed = 0;
  for (int trial = 0; trial < 4; ++trial) {
    GenerationRequest request = SchemaRequest(trial == 0 ? 0.0f : 1.0f, 100 + trial);
    request.n = 2;
    // An unconstrained request in the same batch: its text is what it is alone.
    GenerationRequest plain;
    plain.prompt = "The old house stood";
    plain.max_tokens = 24;
    plain.sampling.seed = 7;
    const ChoiceOutput alone = Run(plain).at(0);
    Collector side;
    ASSERT_TRUE(executor_->Enqueue(plain, side.Callback()).ok());
    const std::vector<ChoiceOutput> choices = Run(request);
    EXPECT_EQ(ChoiceOutputs(side.Wait(), 1).at(0).text, alone.text);
    ASSERT_EQ(choices.size(), 2u);
    for (const ChoiceOutput& choice : choices) {
      if (choice.reason == FinishReason::kLength) continue;  // cut by max_tokens
      EXPECT_EQ(choice.reason, FinishReason::kStop) << choice.text;
      const nlohmann::json value =
          nlohmann::json::parse(choice.text, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(value.is_discarded()) << "trial " << trial << ": " << choice.text;
      EXPECT_TRUE(HasShape(value)) << choice.text;
      ++completed;
    }
  }
  EXPECT_GE(completed, 6);
}

TEST_F(ConstrainedOutputTest, JsonObjectAndTheCutAtMaxTokens) {
  GenerationRequest request;
  request.prompt = "Open file";
  request.max_tokens = 300;
  request.sampling.temperature = 0.0f;
  request.response_format = JsonGrammar::AnyObject();
  const ChoiceOutput object = Run(request).at(0);
  const nlohmann::json value = nlohmann::json::parse(object.text, nullptr, false);
  if (object.reason == FinishReason::kStop) {
    ASSERT_FALSE(value.is_discarded()) << object.text;
    EXPECT_TRUE(value.is_object()) << object.text;
  }
  GenerationRequest cut = SchemaRequest(1.0f, 3);
  cut.max_tokens = 3;
  const ChoiceOutput short_choice = Run(cut).at(0);
  EXPECT_EQ(short_choice.reason, FinishReason::kLength);
  EXPECT_EQ(short_choice.tokens.size(), 3u);
  EXPECT_EQ(short_choice.text.find_first_not_of(" \n"), short_choice.text.find('{'))
      << short_choice.text;
}

// Without the mask, the model writes English: the checks above are not vacuous.
TEST_F(ConstrainedOutputTest, WithoutTheMaskTheModelWritesNoJson) {
  GenerationRequest request = SchemaRequest(0.0f, 1);
  request.response_format = nullptr;
  request.max_tokens = 60;
  const ChoiceOutput choice = Run(request).at(0);
  EXPECT_TRUE(nlohmann::json::parse(choice.text, nullptr, false).is_discarded()) << choice.text;
}

}  // namespace
}  // namespace abcd
