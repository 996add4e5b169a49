// abcd-cli tokenize: the ids equal Hugging Face's tokenizers (npm, the tests/fixtures/
// tokenizer_json reference) on every text of the llama3 (byte-level, bos added), qwen2
// (byte-level, no bos) and llama2 (SentencePiece-style Metaspace, <s> added) fixtures, with and
// without special tokens, per --jsonl record and for a whole --text-file (also from stdin); a
// SentencePiece model (the bundled untrained LM: bos first; the translation model: eos last);
// --lines keeps one output line per input line; bad input is one line naming the flag.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/cli/cli_runner.h"
#include "tests/testing/read_file.h"

namespace {

namespace fs = std::filesystem;
using abcd::testing::CliResult;
using abcd::testing::RunCli;
using nlohmann::json;

const std::string kTokenizeSource = ABCD_SOURCE_DIR;

void WriteTokenizeFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The output lines, each parsed as JSON.
std::vector<json> TokenizeJsonLines(const CliResult& r) {
  std::vector<json> out;
  for (absl::string_view line : absl::StrSplit(r.output, '\n', absl::SkipEmpty())) {
    out.push_back(json::parse(line, nullptr, /*allow_exceptions=*/false));
  }
  return out;
}

// A model directory without weights (tokenize reads config.json and the tokenizer only): the
// golden hf_llama config with room for the fixture's ids and `bos_id`, the fixture's
// tokenizer.json and a tokenizer_config.json naming `bos_token` (null: Qwen's). Removed at the end.
class TokenizeModelDir {
 public:
  TokenizeModelDir(const std::string& fixture, int bos_id, const json& bos_token) {
    char pattern[] = "/tmp/abcd-tokenize-cli-XXXXXX";
    dir_ = mkdtemp(pattern);
    json config = json::parse(
        abcd::testing::ReadFile(kTokenizeSource + "/tests/fixtures/golden/hf_llama/config.json"));
    config["vocab_size"] = 1024;
    config["bos_token_id"] = bos_id;
    WriteTokenizeFile(file("config.json"), config.dump(2));
    fs::copy_file(kTokenizeSource + "/tests/fixtures/tokenizer_json/" + fixture + ".tokenizer.json",
                  file("tokenizer.json"));
    WriteTokenizeFile(file("tokenizer_config.json"), json{{"bos_token", bos_token}}.dump());
  }
  ~TokenizeModelDir() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  const std::string& dir() const { return dir_; }
  fs::path file(const std::string& name) const { return fs::path(dir_) / name; }

 private:
  std::string dir_;
};

TEST(TokenizeCli, IdsEqualHuggingFaceTokenizers) {
  const struct {
    const char* fixture;
    int bos_id;
    json bos_token;
  } cases[] = {{"llama3", 956, "<|begin_of_text|>"}, {"qwen2", 956, nullptr}, {"llama2", 1, "<s>"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture);
    const TokenizeModelDir model(c.fixture, c.bos_id, c.bos_token);
    const json expected = json::parse(abcd::testing::ReadFile(
        kTokenizeSource + "/tests/fixtures/tokenizer_json/" + c.fixture + ".expected.json"));
    ASSERT_GT(expected["cases"].size(), 30u);
    std::string records;
    for (const json& t : expected["cases"]) absl::StrAppend(&records, t["text"].dump(), "\n");
    WriteTokenizeFile(model.file("texts.jsonl"), records);
    const std::string base = "tokenize --json --model " + model.dir() + " --text-file ";
    const CliResult plain =
        RunCli(base + model.file("texts.jsonl").string() + " --jsonl --no-special");
    const CliResult special = RunCli(base + model.file("texts.jsonl").string() + " --jsonl");
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    ASSERT_EQ(special.exit_code, 0) << special.output;
    const std::vector<json> plain_ids = TokenizeJsonLines(plain);
    const std::vector<json> special_ids = TokenizeJsonLines(special);
    ASSERT_EQ(plain_ids.size(), expected["cases"].size());
    ASSERT_EQ(special_ids.size(), expected["cases"].size());
    int whole_files = 0;
    for (size_t i = 0; i < plain_ids.size(); ++i) {
      const json& t = expected["cases"][i];
      EXPECT_EQ(plain_ids[i], t["ids"]) << t["text"];
      // An empty text gets the bos even where the tokenizer adds none, as /tokenize gives it
      // (decoding needs a token to start from: PrefilledIds).
      const json with_special = t["text"] == "" && t["ids_with_special_tokens"].empty()
                                    ? json::array({c.bos_id})
                                    : t["ids_with_special_tokens"];
      EXPECT_EQ(special_ids[i], with_special) << t["text"];
      // A whole --text-file is one text: a text with newlines gives the reference ids.
      if (t["text"].get<std::string>().find('\n') == std::string::npos) continue;
      ++whole_files;
      WriteTokenizeFile(model.file("text.txt"), t["text"].get<std::string>());
      const CliResult whole = RunCli(base + model.file("text.txt").string());
      EXPECT_EQ(whole.exit_code, 0) << whole.output;
      EXPECT_EQ(json::parse(whole.output, nullptr, false), t["ids_with_special_tokens"])
          << t["text"];
      const CliResult stdin_text =
          RunCli(base + "- --no-special < " + model.file("text.txt").string());
      EXPECT_EQ(json::parse(stdin_text.output, nullptr, false), t["ids"]) << t["text"];
    }
    EXPECT_GE(whole_files, 3);
  }
}

// A SentencePiece model: a decoder's text starts with its bos (config.json bos_id 1), a
// translation model's source ends with its eos (2), as /tokenize gives them; the text's own ids
// are the same either way. Plain output is the ids separated by spaces.
TEST(TokenizeCli, SentencePieceBosAndTranslationEos) {
  const std::string checkpoints = kTokenizeSource + "/models/checkpoints/";
  const CliResult lm_plain = RunCli("tokenize --no-special --text \"Hello world\" --model " +
                                    checkpoints + "abc-lm-untrained");
  const CliResult lm =
      RunCli("tokenize --text \"Hello world\" --model " + checkpoints + "abc-lm-untrained");
  const CliResult mt =
      RunCli("tokenize --text \"Hello world\" --model " + checkpoints + "abc-mt-untrained");
  ASSERT_EQ(lm_plain.exit_code, 0) << lm_plain.output;
  ASSERT_EQ(lm.exit_code, 0) << lm.output;
  ASSERT_EQ(mt.exit_code, 0) << mt.output;
  const std::vector<std::string> ids =
      absl::StrSplit(lm_plain.output, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  ASSERT_GE(ids.size(), 2u) << lm_plain.output;
  EXPECT_EQ(lm.output, "1 " + lm_plain.output);
  const CliResult mt_plain = RunCli("tokenize --no-special --text \"Hello world\" --model " +
                                    checkpoints + "abc-mt-untrained");
  ASSERT_EQ(mt_plain.exit_code, 0) << mt_plain.output;
  EXPECT_EQ(mt.output, mt_plain.output.substr(0, mt_plain.output.size() - 1) + " 2\n");
}

// --lines: one output line per input line, an empty line included (bos alone, as /tokenize
// gives an empty prompt); each line's ids are those of --text with the same text.
TEST(TokenizeCli, LinesAreTextsOfTheirOwn) {
  const TokenizeModelDir model("llama3", 956, "<|begin_of_text|>");
  WriteTokenizeFile(model.file("lines.txt"), "Hello world\n\nsecond line");
  const CliResult lines = RunCli("tokenize --json --lines --model " + model.dir() +
                                 " --text-file " + model.file("lines.txt").string());
  ASSERT_EQ(lines.exit_code, 0) << lines.output;
  const std::vector<json> out = TokenizeJsonLines(lines);
  ASSERT_EQ(out.size(), 3u) << lines.output;
  EXPECT_EQ(out[1], json::array({956}));
  const CliResult second = RunCli("tokenize --json --text \"second line\" --model " + model.dir());
  EXPECT_EQ(out[2], json::parse(second.output, nullptr, false)) << second.output;
  EXPECT_EQ(out[0][0], 956);
}

// Bad input: exit 2 (1 for a file that cannot be read) and one line naming the flag.
TEST(TokenizeCli, BadInputNamesTheFlag) {
  const TokenizeModelDir model("llama3", 956, "<|begin_of_text|>");
  WriteTokenizeFile(model.file("bad.jsonl"), "{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n");
  WriteTokenizeFile(model.file("broken.jsonl"), "{\"text\": \n");
  WriteTokenizeFile(model.file("latin1.txt"), "ok\ncaf\xe9\n");
  const std::string m = " --model " + model.dir();
  const struct {
    std::string args;
    int exit_code;
    std::string message;
  } cases[] = {
      {"tokenize" + m, 2, "give exactly one of --text and --text-file"},
      {"tokenize --text a --text-file b" + m, 2, "give exactly one of --text and --text-file"},
      {"tokenize --text a --lines" + m, 2, "--lines needs --text-file"},
      {"tokenize --text-file - --lines --jsonl" + m, 2, "--lines and --jsonl are exclusive"},
      {"tokenize --text-file " + model.file("missing.txt").string() + m, 1,
       "cannot read --text-file " + model.file("missing.txt").string()},
      {"tokenize --jsonl --text-file " + model.file("bad.jsonl").string() + m, 2,
       "--text-file line 3: a --jsonl record is a JSON string or an object with a string \"text\""},
      {"tokenize --jsonl --text-file " + model.file("broken.jsonl").string() + m, 2,
       "--text-file line 1: not JSON"},
      {"tokenize --lines --text-file " + model.file("latin1.txt").string() + m, 2,
       "--text-file line 2: tokenize: text is not valid UTF-8"},
      {"tokenize --text-file " + model.file("latin1.txt").string() + m, 2,
       "--text-file " + model.file("latin1.txt").string() + ": tokenize: text is not valid UTF-8"},
      {"tokenize --text a --model " + model.dir() + "/missing", 1, "config.json"},
      {"tokenize --text a --bos" + m, 2, "--bos"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = RunCli(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << r.output;
    const std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
    EXPECT_EQ(lines.size(), 1u) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
  }
}

}  // namespace
