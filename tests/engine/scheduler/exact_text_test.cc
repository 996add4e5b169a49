// Exact text (issue 26, item 1): what a request returns is what its tokens add after the prompt,
// so prompt text + every returned piece == the text of prompt + generated ids. TextStream with
// the preceding ids, over random prompts, generated ids and stop strings, on both shipped
// tokenizers (models/tokenizers/*.model, unigram with byte fallback) and a byte-fallback BPE
// fixture with Llama-2's options (tests/fixtures/tokenizers/make_bpe_tokenizer.py); then the
// Executor on the trained abc-lm over random prompts and seeds: text and token-id prompts,
// n choices, sessions, and the ids a frontend decodes logprob texts after.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/text_stream.h"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"

namespace abcd {
namespace {

using testing::ChoiceOutput;
using testing::ChoiceOutputs;
using testing::Collector;
using testing::kTrainedLmDir;

const std::string kTokenizerDir = std::string(ABCD_SOURCE_DIR) + "/models/tokenizers";

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto tokenizer = Tokenizer::Load(path);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// The shipped tokenizers and the BPE fixture.
std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> AllTokenizers() {
  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> out;
  for (const std::string& path :
       {kTokenizerDir + "/lm.model", kTokenizerDir + "/mt.model",
        std::string(ABCD_FIXTURE_DIR) + "/tokenizers/bpe_byte_fallback.model"}) {
    out.emplace_back(path, LoadTokenizer(path));
  }
  return out;
}

// Random text from words that stress the decoder: leading-space pieces, punctuation without a
// space, multi-byte characters outside the vocabularies (byte pieces), runs of spaces, digits.
std::string RandomText(std::mt19937& rng, int max_words) {
  static const char* const kWords[] = {
      "The",  "old",   "house", "stood", "in",     "the",    "door",   ",",    ".",
      "'s",   "Grüße", "naïve", "café",  "—",      "日本語", "🙂",   "x²",   "42",
      "1999", "(",     ")",     "Datei", "öffnen", "\n",     "      ", "free", "software"};
  const int words = 1 + static_cast<int>(rng() % max_words);
  std::string text;
  for (int i = 0; i < words; ++i) {
    if (i > 0 && rng() % 4 != 0) text += " ";
    text += kWords[rng() % std::size(kWords)];
  }
  return text;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What `generated` adds after `preceding`: Decode(preceding + generated) minus
// Decode(preceding), which must be its prefix.
std::string TextAfter(const Tokenizer& tokenizer, const std::vector<int32_t>& preceding,
                      const std::vector<int32_t>& generated) {
  const std::string before = *tokenizer.Decode(preceding);
  const std::string whole = *tokenizer.Decode(Concat(preceding, generated));
  EXPECT_TRUE(absl::StartsWith(whole, before)) << before << " | " << whole;
  return whole.substr(std::min(before.size(), whole.size()));
}

TEST(ExactTextTest, FirstPieceKeepsItsSpaceAfterThePrompt) {
  auto tokenizer = LoadTokenizer(kTokenizerDir + "/lm.model");
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> prompt = Concat({1}, *tokenizer->Encode("The old house stood"));
  const std::vector<int32_t> generated = *tokenizer->Encode(" in the door");
  TextStream stream(*tokenizer, {}, prompt);
  std::string released;
  for (int32_t id : generated) released += *stream.Append(id);
  released += stream.Flush();
  EXPECT_EQ(released, " in the door");
  EXPECT_EQ(*tokenizer->Decode(prompt) + released, "The old house stood in the door");
  EXPECT_EQ(std::vector<int32_t>(stream.tokens().begin(), stream.tokens().end()), generated);
  // Without the prompt the first piece is decoded alone (the text starts the output).
  TextStream alone(*tokenizer, {});
  std::string first;
  for (int32_t id : generated) first += *alone.Append(id);
  EXPECT_EQ(first + alone.Flush(), "in the door");
}

// With remove_extra_whitespaces (the shipped tokenizers), a decode drops every leading space
// piece until one has text, so a tail of bare-space pieces decodes to nothing on its own: the
// context reaches back to a piece with text, so the spaces and the new piece's own space survive.
TEST(ExactTextTest, ContextReachesPastWhitespaceOnlyPieces) {
  auto tokenizer = LoadTokenizer(kTokenizerDir + "/lm.model");
  ASSERT_NE(tokenizer, nullptr);
  // The bare space piece "▁": nothing alone, a space after text.
  const int32_t a = tokenizer->Encode("a")->back();
  int32_t space = -1;
  for (int32_t id = 4; id < tokenizer->vocab_size() && space < 0; ++id) {
    if (tokenizer->Decode(std::vector<int32_t>{id})->empty() &&
        *tokenizer->Decode(std::vector<int32_t>{a, id}) == "a ") {
      space = id;
    }
  }
  ASSERT_GE(space, 0);
  std::vector<int32_t> prompt = Concat({1}, *tokenizer->Encode("Hello"));
  for (int i = 0; i < 40; ++i) prompt.push_back(space);  // a token-id prompt
  const std::vector<int32_t> generated = *tokenizer->Encode(" world");
  ASSERT_TRUE(tokenizer->Decode(std::span(prompt).last(TextStream::kContextTokens))->empty());
  const std::span<const int32_t> tail = TextStream::ContextTail(*tokenizer, prompt);
  EXPECT_GT(tail.size(), TextStream::kContextTokens);
  EXPECT_FALSE(tokenizer->Decode(tail)->empty());
  TextStream stream(*tokenizer, {}, prompt);
  std::string released;
  for (int32_t id : generated) released += *stream.Append(id);
  released += stream.Flush();
  EXPECT_EQ(released, TextAfter(*tokenizer, prompt, generated));
  EXPECT_EQ(*tokenizer->Decode(prompt) + released, "Hello" + std::string(40, ' ') + " world");
}

// The property over random prompts (a fresh request's bos + prompt, or a session's history +
// new prompt), random generated ids over the whole vocabulary and stop strings.
TEST(ExactTextTest, PromptTextPlusPiecesIsTheWholeTextOnRandomInputs) {
  std::mt19937 rng(26);
  for (const auto& [name, tokenizer] : AllTokenizers()) {
    ASSERT_NE(tokenizer, nullptr) << name;
    const int vocab = tokenizer->vocab_size();
    int with_stop = 0;
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<int32_t> preceding = {1};
      preceding = Concat(preceding, *tokenizer->Encode(RandomText(rng, 12)));
      if (trial % 4 == 1) {  // a session: history, then the next turn's prompt without bos
        preceding = Concat(preceding, *tokenizer->Encode(RandomText(rng, 6)));
      } else if (trial % 4 == 2) {
        preceding = {1};  // an empty prompt: the text starts the output
      }
      std::vector<int32_t> generated;
      const int length = 1 + static_cast<int>(rng() % 24);
      while (static_cast<int>(generated.size()) < length) {
        if (rng() % 2 == 0) {
          generated = Concat(generated, *tokenizer->Encode(RandomText(rng, 3)));
        } else {
          generated.push_back(static_cast<int32_t>(rng() % vocab));  // bytes, controls, pieces
        }
      }
      std::string expected = TextAfter(*tokenizer, preceding, generated);
      std::vector<std::string> stop;
      if (trial % 3 == 0 && expected.size() > 4) {
        stop.push_back(expected.substr(rng() % (expected.size() - 2), 1 + rng() % 3));
        expected.resize(expected.find(stop[0]));
        ++with_stop;
      }
      TextStream stream(*tokenizer, stop, preceding);
      std::string released;
      for (int32_t id : generated) {
        auto piece = stream.Append(id);
        ASSERT_TRUE(piece.ok()) << piece.status();
        released += *piece;
        if (stream.stopped()) break;
      }
      released += stream.Flush();
      ASSERT_EQ(released, expected)
          << name << " trial " << trial << " preceding " << absl::StrJoin(preceding, ",")
          << " generated " << absl::StrJoin(generated, ",");
    }
    EXPECT_GT(with_stop, 50) << name;
  }
}

// The request's choices (each must have finished; every event OK, preceding ids sent at most
// once per choice).
std::vector<ChoiceOutput> RunChoices(Executor& executor, const GenerationRequest& request) {
  Collector collector;
  EXPECT_TRUE(executor.Enqueue(request, collector.Callback()).ok());
  const std::vector<GenerationEvent> events = collector.Wait();
  std::set<int> preceding_sent;
  for (const GenerationEvent& event : events) {
    EXPECT_TRUE(event.status.ok()) << event.status;
    if (!event.preceding_token_ids.empty()) {
      EXPECT_TRUE(preceding_sent.insert(event.index).second) << "preceding ids sent twice";
    }
  }
  std::vector<ChoiceOutput> choices = ChoiceOutputs(events, request.n);
  for (const ChoiceOutput& choice : choices) EXPECT_TRUE(choice.finished);
  return choices;
}

// The trained abc-lm (lm.model, byte fallback) sampling at temperature 1 from random prompts:
// every choice's text is what its tokens add after the prompt (and a session's history).
TEST(ExactTextTest, ExecutorTextFollowsThePromptOnEveryPath) {
  auto model = Model::Load(kTrainedLmDir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = LoadTokenizer(kTrainedLmDir + "/tokenizer.model");
  ASSERT_NE(tokenizer, nullptr);
  ExecutorOptions options;
  options.model_name = "abc-lm";
  auto executor = Executor::Create(**model, *tokenizer, options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  std::mt19937 rng(2026);
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    GenerationRequest request;
    const std::string prompt = RandomText(rng, 8);
    const std::vector<int32_t> prompt_ids = *tokenizer->Encode(prompt);
    if (trial % 2 == 1) {
      request.prompt_token_ids = prompt_ids;
    } else {
      request.prompt = prompt;
    }
    request.max_tokens = 10;
    request.sampling.temperature = 1.0f;
    request.sampling.seed = rng();
    request.n = trial % 3 == 0 ? 3 : 1;
    request.logprobs = trial % 2 == 0 ? 1 : -1;
    request.save_state = request.n == 1;
    const std::vector<int32_t> preceding = Concat({1}, prompt_ids);
    const std::vector<ChoiceOutput> choices = RunChoices(**executor, request);
    const std::string state = choices.empty() ? "" : choices[0].saved_state;
    for (size_t index = 0; index < choices.size(); ++index) {
      const ChoiceOutput& choice = choices[index];
      EXPECT_EQ(choice.text, TextAfter(*tokenizer, preceding, choice.tokens))
          << "trial " << trial << " choice " << index << " prompt '" << prompt << "'";
      if (request.logprobs >= 0 && !choice.tokens.empty()) {
        const std::span<const int32_t> tail = TextStream::ContextTail(*tokenizer, preceding);
        EXPECT_EQ(choice.preceding, std::vector<int32_t>(tail.begin(), tail.end()));
      } else {
        EXPECT_TRUE(choice.preceding.empty());
      }
      ++checked;
    }
    if (state.empty()) continue;
    // The session's next turn: its text follows the history and the new prompt.
    GenerationRequest next;
    next.prompt = RandomText(rng, 4);
    next.resume_state = state;
    next.max_tokens = 8;
    next.sampling.temperature = 1.0f;
    next.sampling.seed = rng();
    const std::vector<int32_t> history =
        Concat(Concat(preceding, choices.at(0).tokens), *tokenizer->Encode(next.prompt));
    const ChoiceOutput turn = RunChoices(**executor, next).at(0);
    EXPECT_EQ(turn.text, TextAfter(*tokenizer, history, turn.tokens)) << "trial " << trial;
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

}  // namespace
}  // namespace abcd
