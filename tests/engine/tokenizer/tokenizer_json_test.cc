// The tokenizer.json tokenizer (engine/tokenizer/hf_tokenizer.h) against Hugging Face's own
// `tokenizers` (npm 0.23.2): for each fixture of tests/fixtures/tokenizer_json/ (byte-level
// Llama 3 / Qwen2 / GPT-2 styles, SentencePiece-style Llama 2 / Metaspace ones), every corpus
// text (Unicode, emoji, CJK, code, digits, long whitespace runs, every added token) encodes to
// the recorded ids, with the post-processor's tokens around them as recorded, and the ids decode
// to the recorded text. The expected files come from make_fixtures.js there; node is not needed
// here. Also: TokenBytes and the server's TextStream agree with Decode, concurrent Encode, and
// what is refused at load names the field.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/scheduler/text_stream.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/hf_unicode.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

using json = nlohmann::json;

const std::string kDir = std::string(ABCD_FIXTURE_DIR) + "/tokenizer_json/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class ReferenceTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    expected_ = json::parse(ReadFile(kDir + GetParam() + ".expected.json"));
    absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
        Tokenizer::Load(kDir + GetParam() + ".tokenizer.json");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    tokenizer_ = *std::move(loaded);
    ASSERT_NE(tokenizer_->hf(), nullptr);
  }
  json expected_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(ReferenceTest, IdsAndDecodedTextMatchTheReference) {
  EXPECT_EQ(tokenizer_->vocab_size(), expected_["vocab_size"].get<int>());
  const hf::HfTokenizer& hf = *tokenizer_->hf();
  ASSERT_GE(expected_["cases"].size(), 30u);
  for (const json& c : expected_["cases"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(testing::Message() << "text: " << json(text).dump());
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>());
    std::vector<int32_t> with_special = hf.template_prefix();
    with_special.insert(with_special.end(), ids->begin(), ids->end());
    with_special.insert(with_special.end(), hf.template_suffix().begin(),
                        hf.template_suffix().end());
    EXPECT_EQ(with_special, c["ids_with_special_tokens"].get<std::vector<int32_t>>());
    absl::StatusOr<std::string> decoded = tokenizer_->Decode(c["ids"].get<std::vector<int32_t>>());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>());
  }
}

// Each id's TokenBytes, concatenated, give the decoded text (up to the one leading space the
// SentencePiece-style decoders drop at the start of a text).
TEST_P(ReferenceTest, TokenBytesConcatenateToTheDecodedText) {
  const std::vector<std::string> bytes = tokenizer_->TokenBytes();
  ASSERT_EQ(static_cast<int>(bytes.size()), tokenizer_->vocab_size());
  for (const json& c : expected_["cases"]) {
    std::string joined;
    for (int32_t id : c["ids"].get<std::vector<int32_t>>()) joined += bytes[id];
    joined = hf::Utf8Lossy(joined);
    const std::string decoded = c["decoded"].get<std::string>();
    EXPECT_TRUE(joined == decoded || joined == " " + decoded)
        << json(c["text"]).dump() << " -> " << json(joined).dump() << " vs "
        << json(decoded).dump();
  }
}

TEST_P(ReferenceTest, ConcurrentEncodesAgree) {
  std::vector<std::string> texts;
  for (const json& c : expected_["cases"]) texts.push_back(c["text"].get<std::string>());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(texts[i]);
          if (!ids.ok() || *ids != expected_["cases"][i]["ids"].get<std::vector<int32_t>>()) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// The server's incremental detokenisation (engine/scheduler/text_stream.h) on these
// tokenizers: the text released token by token, then flushed, is the whole decode.
TEST_P(ReferenceTest, TextStreamReleasesTheDecodedText) {
  for (const json& c : expected_["cases"]) {
    TextStream stream(*tokenizer_, {});
    std::string text;
    for (int32_t id : c["ids"].get<std::vector<int32_t>>()) {
      absl::StatusOr<std::string> piece = stream.Append(id);
      ASSERT_TRUE(piece.ok()) << piece.status();
      text += *piece;
    }
    text += stream.Flush();
    EXPECT_EQ(text, c["decoded"].get<std::string>()) << json(c["text"]).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceTest,
                         testing::Values("llama3", "qwen2", "gpt2", "split_behaviors", "whitespace",
                                         "llama2", "metaspace", "metaspace_split"));

// Byte-level tokenizers lose nothing: long runs of whitespace (past the PCRE2 JIT's stack for
// `\s+(?!\S)`), mixed scripts and lone surrogate-free emoji decode back to the text.
TEST(TokenizerJson, ByteLevelRoundTripsLongWhitespaceRuns) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(kDir + "llama3.tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  for (const std::string& text :
       {std::string(200000, ' ') + "x", "a" + std::string(100000, '\n') + "b\t\t",
        absl::StrCat("\xe6\x97\xa5\xf0\x9f\xa4\x97", std::string(5000, ' '), "end  ")}) {
    absl::StatusOr<std::vector<int32_t>> ids = (*tokenizer)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    absl::StatusOr<std::string> back = (*tokenizer)->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, text);
  }
}

TEST(TokenizerJson, InvalidUtf8AndNegativeIdsAreErrors) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(kDir + "gpt2.tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_FALSE((*tokenizer)->Encode("bad \xff byte").ok());
  EXPECT_FALSE((*tokenizer)->Decode(std::vector<int32_t>{5, -1}).ok());
  // Ids past the vocab (a padded embedding's rows) decode to nothing.
  absl::StatusOr<std::string> text = (*tokenizer)->Decode(std::vector<int32_t>{72, 1 << 20});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "H");
}

// Rust's from_utf8_lossy: one U+FFFD per maximal invalid subpart.
TEST(TokenizerJson, Utf8LossyMatchesRust) {
  EXPECT_EQ(hf::Utf8Lossy("a\xe6\x97"), "a\xef\xbf\xbd");
  EXPECT_EQ(hf::Utf8Lossy("\xff\xfe"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(hf::Utf8Lossy("\xe6\x97x"), "\xef\xbf\xbdx");
  EXPECT_EQ(hf::Utf8Lossy("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(hf::Utf8Lossy("ok \xf0\x9f\xa4\x97"), "ok \xf0\x9f\xa4\x97");
}

// What is not implemented is refused at load, naming the field.
TEST(TokenizerJson, UnsupportedFeaturesAreRefusedNamingTheField) {
  json base = json::parse(ReadFile(kDir + "llama3.tokenizer.json"));
  const auto expect_refused = [&](const std::string& pointer, const json& value,
                                  const std::string& field) {
    json spec = base;
    spec[json::json_pointer(pointer)] = value;
    absl::StatusOr<std::unique_ptr<hf::HfTokenizer>> t = hf::HfTokenizer::Parse(spec.dump());
    ASSERT_FALSE(t.ok()) << pointer;
    EXPECT_NE(t.status().message().find("tokenizer.json: " + field), std::string::npos)
        << t.status();
  };
  expect_refused("/model/type", "Unigram", "model.type: \"Unigram\" is not supported");
  expect_refused("/model/dropout", 0.1, "model.dropout");
  expect_refused("/model/continuing_subword_prefix", "##", "model.continuing_subword_prefix");
  expect_refused("/model/merges/0", json::array({"nope", "x"}), "model.merges[0]");
  expect_refused("/model/merges/1", 7, "model.merges[1]");
  expect_refused("/normalizer", {{"type", "Precompiled"}}, "normalizer.type: \"Precompiled\"");
  expect_refused("/pre_tokenizer/pretokenizers/1", {{"type", "BertPreTokenizer"}},
                 "pre_tokenizer.pretokenizers[1].type: \"BertPreTokenizer\"");
  expect_refused("/pre_tokenizer/pretokenizers/0/pattern", {{"Regex", "(unclosed"}},
                 "pre_tokenizer.pretokenizers[0].pattern");
  expect_refused("/pre_tokenizer/pretokenizers/0/behavior", "Sideways",
                 "pre_tokenizer.pretokenizers[0].behavior");
  expect_refused("/decoder", {{"type", "WordPiece"}}, "decoder.type: \"WordPiece\"");
  expect_refused("/post_processor", {{"type", "Weird"}}, "post_processor.type: \"Weird\"");
  expect_refused("/added_tokens/0/id", "x", "added_tokens[0].id");
  expect_refused("/added_tokens/0/id", 1 << 29, "added_tokens: id 536870912");
  expect_refused("/model/vocab/!", 1 << 29, "model.vocab: the id of \"!\"");
  json no_model = base;
  no_model.erase("model");
  absl::StatusOr<std::unique_ptr<hf::HfTokenizer>> t = hf::HfTokenizer::Parse(no_model.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "tokenizer.json: model: is missing");
}

}  // namespace
}  // namespace abcd
