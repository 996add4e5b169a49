// LoadModelTokenizer (server/core/model_tokenizer.h): which file of a model directory becomes
// the tokenizer. tokenizer.json is preferred; a tokenizer.json that does not load falls back
// to a tokenizer.model beside it; alone it is refused naming the field; neither file, or more
// pieces than vocab_size, is refused. And whether prompts start with bos where
// tokenizer_config.json does not say: the tokenizer.json's post-processor decides; and which id
// that bos is: the tokenizer's (LoadModelDirectoryConfig).
#include "server/core/model_tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "engine/model/model_config.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

namespace fs = std::filesystem;

const std::string kJson = std::string(ABCD_FIXTURE_DIR) + "/tokenizer_json/llama3.tokenizer.json";
const std::string kFixtures = std::string(ABCD_FIXTURE_DIR) + "/tokenizer_json/";
const std::string kModel = std::string(ABCD_SOURCE_DIR) + "/models/tokenizers/lm.model";

class ModelDir {
 public:
  ModelDir() {
    char pattern[] = "/tmp/abcd-model-tokenizer-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~ModelDir() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  const std::string& dir() const { return dir_; }
  void Copy(const std::string& from, const std::string& name) const {
    fs::copy_file(from, fs::path(dir_) / name, fs::copy_options::overwrite_existing);
  }

 private:
  std::string dir_;
};

ModelConfig Config(int vocab_size) {
  ModelConfig config;
  config.vocab_size = vocab_size;
  return config;
}

TEST(ModelTokenizer, TokenizerJsonAloneLoads) {
  ModelDir d;
  d.Copy(kJson, "tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(d.dir(), Config(1024));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE((*t)->hf(), nullptr);
  EXPECT_EQ((*t)->vocab_size(), 964);
}

TEST(ModelTokenizer, TokenizerJsonIsPreferredOverTokenizerModel) {
  ModelDir d;
  d.Copy(kJson, "tokenizer.json");
  d.Copy(kModel, "tokenizer.model");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(d.dir(), Config(8000));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE((*t)->hf(), nullptr);
}

TEST(ModelTokenizer, UnreadableTokenizerJsonFallsBackToTokenizerModel) {
  ModelDir d;
  std::ofstream(fs::path(d.dir()) / "tokenizer.json")
      << R"({"model": {"type": "Unigram", "vocab": []}})";
  d.Copy(kModel, "tokenizer.model");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadModelTokenizer(d.dir(), Config(8000));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->hf(), nullptr);
  EXPECT_EQ((*t)->vocab_size(), 8000);
}

TEST(ModelTokenizer, RefusalsNameTheFile) {
  ModelDir d;
  absl::StatusOr<std::unique_ptr<Tokenizer>> none = LoadModelTokenizer(d.dir(), Config(8000));
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  std::ofstream(fs::path(d.dir()) / "tokenizer.json")
      << R"({"model": {"type": "Unigram", "vocab": []}})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> unigram = LoadModelTokenizer(d.dir(), Config(8000));
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.status().message().find(d.dir() + "/tokenizer.json: model.type: \"Unigram\""),
            std::string::npos)
      << unigram.status();
  d.Copy(kJson, "tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> big = LoadModelTokenizer(d.dir(), Config(900));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("964 pieces, more than the model's vocab_size 900"),
            std::string::npos)
      << big.status();
}

TEST(ModelTokenizer, TokenizerJsonPostProcessorDecidesAddBos) {
  ModelDir d;
  d.Copy(std::string(ABCD_FIXTURE_DIR) + "/golden/hf_llama/config.json", "config.json");
  const auto add_bos = [&] {
    absl::StatusOr<ModelConfig> config = LoadModelDirectoryConfig(d.dir());
    EXPECT_TRUE(config.ok()) << config.status();
    return config.ok() && config->add_bos;
  };
  EXPECT_TRUE(add_bos());                                         // neither file: the default
  d.Copy(kFixtures + "llama3.tokenizer.json", "tokenizer.json");  // TemplateProcessing bos
  EXPECT_TRUE(add_bos());
  d.Copy(kFixtures + "qwen2.tokenizer.json", "tokenizer.json");  // ByteLevel: nothing
  EXPECT_FALSE(add_bos());
  std::ofstream(fs::path(d.dir()) / "tokenizer_config.json") << R"({"add_bos_token": true})";
  EXPECT_TRUE(add_bos());  // tokenizer_config.json says
}

// An add_bos_token in tokenizer_config.json wins over the tokenizer.json post-processor, as
// transformers rebuilds the post-processor from it (LlamaTokenizerFast, transformers 5): false
// drops Llama 3's TemplateProcessing bos, and so does null (falsy there); true adds one to
// Qwen2's ByteLevel. Without the field the post-processor decides.
TEST(ModelTokenizer, AddBosTokenInTokenizerConfigWinsOverThePostProcessor) {
  ModelDir d;
  d.Copy(std::string(ABCD_FIXTURE_DIR) + "/golden/hf_llama/config.json", "config.json");
  const auto add_bos = [&](const std::string& fixture, const std::string& tokenizer_config) {
    d.Copy(kFixtures + fixture + ".tokenizer.json", "tokenizer.json");
    std::ofstream(fs::path(d.dir()) / "tokenizer_config.json") << tokenizer_config;
    absl::StatusOr<ModelConfig> config = LoadModelDirectoryConfig(d.dir());
    EXPECT_TRUE(config.ok()) << config.status();
    return config.ok() ? std::string(config->add_bos ? "bos" : "none") : "error";
  };
  EXPECT_EQ(add_bos("llama3", R"({"add_bos_token": false})"), "none");
  EXPECT_EQ(add_bos("llama3", R"({"add_bos_token": null})"), "none");
  EXPECT_EQ(add_bos("llama2", R"({"add_bos_token": false, "add_eos_token": false})"), "none");
  EXPECT_EQ(add_bos("qwen2", R"({"add_bos_token": null, "bos_token": null})"), "none");
  EXPECT_EQ(add_bos("qwen2", R"({"add_bos_token": true})"), "bos");
  EXPECT_EQ(add_bos("llama3", R"({"bos_token": "<|begin_of_text|>"})"), "bos");  // the template's
  EXPECT_EQ(add_bos("qwen2", R"({"bos_token": null})"), "none");                 // the template's
}

// The bos a prompt starts with is the tokenizer's, as in transformers: tokenizer_config.json's
// bos_token as tokenizer.json's added tokens number it; else config.json's bos_token_id. Never
// generation_config.json's (transformers reads it only to start generate() without input ids).
TEST(ModelTokenizer, TheTokenizerDecidesTheBosId) {
  ModelDir d;
  std::ifstream golden(std::string(ABCD_FIXTURE_DIR) + "/golden/hf_llama/config.json");
  nlohmann::json config = nlohmann::json::parse(golden);
  config["vocab_size"] = 1024;  // the llama3 fixture's ids reach 964
  config["bos_token_id"] = 3;
  std::ofstream(fs::path(d.dir()) / "config.json") << config.dump();
  std::ofstream(fs::path(d.dir()) / "generation_config.json")
      << R"({"bos_token_id": 5, "eos_token_id": 2})";
  const auto bos_id = [&](const std::string& tokenizer_config) {
    if (!tokenizer_config.empty()) {
      std::ofstream(fs::path(d.dir()) / "tokenizer_config.json") << tokenizer_config;
    }
    absl::StatusOr<ModelConfig> loaded = LoadModelDirectoryConfig(d.dir());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->bos_id : -1;
  };
  EXPECT_EQ(bos_id(""), 3);  // config.json's, not generation_config.json's 5
  d.Copy(kJson, "tokenizer.json");
  EXPECT_EQ(bos_id(""), 3);  // no tokenizer_config.json
  EXPECT_EQ(bos_id(R"({"bos_token": "<|begin_of_text|>"})"), 956);
  EXPECT_EQ(bos_id(R"({"bos_token": {"__type": "AddedToken", "content": "<|eot_id|>"}})"), 960);
  EXPECT_EQ(bos_id(R"({"bos_token": null, "add_bos_token": false})"), 3);  // Qwen's
  EXPECT_EQ(bos_id(R"({"bos_token": "<not a token>"})"), 3);
  config["vocab_size"] = 900;  // an id the embedding lacks is not taken
  std::ofstream(fs::path(d.dir()) / "config.json") << config.dump();
  EXPECT_EQ(bos_id(R"({"bos_token": "<|begin_of_text|>"})"), 3);
}

}  // namespace
}  // namespace abcd
