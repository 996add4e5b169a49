// abcd-cli on Hugging Face checkpoints (issue 24): `info` prints the model_type and state bytes
// equal to the state-size formulas for every golden hf_* fixture, and damaged directories
// (written at test time from a fixture copy) are refused with one line naming the file and the
// field or tensor, never a crash: a truncated shard, a missing tensor, a wrong shape,
// unsupported config fields, an index naming a missing file, pytorch_model.bin only, a
// tokenizer.json this engine cannot read (a Unigram model) and a tokenizer larger than
// vocab_size; a tokenizer.json it can read serves, and eval puts bos before a line where that
// model's tokenizer adds one.
#include <gtest/gtest.h>

#include <cstdint>
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

const std::string kGolden = std::string(ABCD_SOURCE_DIR) + "/tests/fixtures/golden/";

using abcd::testing::ReadFile;

void WriteFile(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Llama and the types built like it (their layers are softmax, or Mistral's window).
bool IsLlamaLike(const std::string& type) {
  return type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3";
}

// Mistral's sliding_window when set (its layers are a window ring), else 0.
int64_t SlidingWindow(const json& c) {
  return c["model_type"] == "mistral" && c.contains("sliding_window") &&
                 !c["sliding_window"].is_null()
             ? c["sliding_window"].get<int64_t>()
             : 0;
}

// The state bytes per sequence (llama: KV bytes per token) of a config.json, fp32, from the
// formulas: gsa L H M (K + V) 4; gla, retnet, hgrn2 L H K V 4; gated_deltanet L Hv K V 4; llama
// 2 L Hkv hd 4 per token (Mistral with sliding_window w: 2 L Hkv hd w 4 fixed). K and V are
// per-head widths (the state holds every query head, also under GQA). fla short convolutions add
// L (conv_size - 1) C 4, C the convolved channels: q, k, v (hgrn2 q, f, i) projection widths.
int64_t FormulaBytes(const json& c) {
  const std::string type = c["model_type"];
  const int64_t d = c["hidden_size"], layers = c["num_hidden_layers"];
  const bool conv = c.value("use_short_conv", false) && type != "retnet";
  const int64_t taps = conv ? c.value("conv_size", int64_t{4}) - 1 : 0;
  if (type == "gated_deltanet") {
    const int64_t heads = c["num_heads"], k = c["head_dim"];
    const int64_t v_heads = c["num_v_heads"].is_null() ? heads : c["num_v_heads"].get<int64_t>();
    const int64_t v = static_cast<int64_t>(k * c["expand_v"].get<double>());
    return layers * (v_heads * k * v + taps * (2 * heads * k + v_heads * v)) * 4;
  }
  if (IsLlamaLike(type)) {
    const int64_t heads = c["num_attention_heads"];
    const int64_t kv_heads = c.value("num_key_value_heads", heads);
    const int64_t head_dim = c.contains("head_dim") && !c["head_dim"].is_null()
                                 ? c["head_dim"].get<int64_t>()
                                 : d / heads;
    const int64_t window = SlidingWindow(c);
    return 2 * layers * kv_heads * head_dim * 4 * (window > 0 ? window : 1);
  }
  if (type == "hgrn2") {
    const int64_t heads = d / c["expand_ratio"].get<int64_t>();
    return layers * (heads * (d / heads) * (d / heads) + taps * 3 * d) * 4;
  }
  const int64_t heads = c["num_heads"];
  const int64_t kv_heads = c.contains("num_kv_heads") && !c["num_kv_heads"].is_null()
                               ? c["num_kv_heads"].get<int64_t>()
                               : heads;
  const int64_t k = static_cast<int64_t>(d * c["expand_k"].get<double>()) / heads;
  const int64_t v = static_cast<int64_t>(d * c["expand_v"].get<double>()) / heads;
  const int64_t conv_floats = taps * (heads * k + kv_heads * (k + v));
  if (type == "gsa") {
    return layers * (heads * c["num_slots"].get<int64_t>() * (k + v) + conv_floats) * 4;
  }
  return layers * (heads * k * v + conv_floats) * 4;  // gla, retnet
}

TEST(HfCli, InfoStateBytesEqualTheFormulas) {
  int fixtures = 0;
  for (const auto& entry : fs::directory_iterator(kGolden)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("hf_", 0) != 0) continue;
    ++fixtures;
    const json config = json::parse(ReadFile(entry.path() / "config.json"));
    const std::string type = config["model_type"];
    // Hybrids (fla `attn`, abcd_llama, Qwen with sliding-window layers) mix layer types: their
    // bytes are pinned by the converter's tests and the parity fixtures, not by these one-type
    // formulas.
    if (type == "abcd_llama" || (config.contains("attn") && !config["attn"].is_null()) ||
        config.value("use_sliding_window", false)) {
      continue;
    }
    const CliResult r = RunCli("info --model " + entry.path().string());
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("model_type: " + type + " (Hugging Face checkpoint)"),
              std::string::npos)
        << name << "\n"
        << r.output;
    EXPECT_NE(r.output.find("tokenizer: none"), std::string::npos) << name << "\n" << r.output;
    const int64_t bytes = FormulaBytes(config);
    const bool kv_cache = IsLlamaLike(type) && SlidingWindow(config) == 0;
    const std::string expected =
        kv_cache ? absl::StrCat("state per sequence: 0 bytes fixed + ", bytes,
                                " bytes per decoded token")
                 : absl::StrCat("state per sequence: ", bytes, " bytes fixed\n");
    EXPECT_NE(r.output.find(expected), std::string::npos)
        << name << ": expected \"" << expected << "\"\n"
        << r.output;
    // One line per layer, each naming its mixer.
    const int layers = config["num_hidden_layers"];
    for (int i = 0; i < layers; ++i) {
      const std::string mixer = !IsLlamaLike(type) ? type : kv_cache ? "softmax" : "window";
      EXPECT_NE(r.output.find(absl::StrCat("decoder.layers.", i, "  self  ", mixer)),
                std::string::npos)
          << name << " layer " << i << "\n"
          << r.output;
    }
  }
  EXPECT_GE(fixtures, 13);
}

// A copy of a golden fixture in a fresh temporary directory, removed at the end of the test.
class DamagedFixture {
 public:
  explicit DamagedFixture(const std::string& fixture) {
    char pattern[] = "/tmp/abcd-hf-cli-XXXXXX";
    dir_ = mkdtemp(pattern);
    fs::copy(kGolden + fixture, dir_, fs::copy_options::recursive);
    fs::remove(fs::path(dir_) / "golden.safetensors");
  }
  ~DamagedFixture() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  const std::string& dir() const { return dir_; }
  fs::path file(const std::string& name) const { return fs::path(dir_) / name; }

  // Rewrites config.json with `key` set to `value` (or removed when value is null).
  void SetConfig(const std::string& key, const json& value) const {
    json config = json::parse(ReadFile(file("config.json")));
    config[key] = value;
    WriteFile(file("config.json"), config.dump(2));
  }
  // Rewrites a safetensors file's header through `edit` (the data section is kept as it is).
  template <typename Edit>
  void EditHeader(const std::string& name, Edit edit) const {
    const std::string bytes = ReadFile(file(name));
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(bytes[i]);
    json header = json::parse(bytes.substr(8, length));
    edit(header);
    const std::string text = header.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    WriteFile(file(name), out + text + bytes.substr(8 + length));
  }

 private:
  std::string dir_;
};

// The load is refused: a normal exit with status 1 or 2 and exactly one line, which contains
// each of `needles`.
void ExpectOneLineError(const CliResult& r, const std::vector<std::string>& needles) {
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "exit " << r.exit_code << "\n" << r.output;
  const std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 1u) << r.output;
  EXPECT_EQ(r.output.rfind("abcd-cli: ", 0), 0u) << r.output;
  for (const std::string& needle : needles) {
    EXPECT_NE(r.output.find(needle), std::string::npos) << "missing \"" << needle << "\" in\n"
                                                        << r.output;
  }
}

TEST(HfCli, TruncatedShardNamesTheFileAndTensor) {
  const DamagedFixture f("hf_llama_sharded_bf16");
  const std::string shard = "model-00002-of-00003.safetensors";
  const std::string bytes = ReadFile(f.file(shard));
  WriteFile(f.file(shard), bytes.substr(0, bytes.size() - 1000));
  ExpectOneLineError(RunCli("info --model " + f.dir()), {f.dir() + "/" + shard, "tensor \""});
  // Cut inside the header: still one clear line naming the file.
  WriteFile(f.file(shard), bytes.substr(0, 100));
  ExpectOneLineError(RunCli("info --model " + f.dir()), {f.dir() + "/" + shard});
}

TEST(HfCli, MissingTensorIsNamed) {
  const DamagedFixture f("hf_gsa");
  f.EditHeader("model.safetensors",
               [](json& header) { header.erase("model.layers.1.attn.f_proj.weight"); });
  // In no file: the message names the directory.
  ExpectOneLineError(RunCli("info --model " + f.dir()),
                     {f.dir() + ": ", "model.layers.1.attn.f_proj.weight", "not found"});
}

// use_short_conv on a checkpoint written without convolutions: the first missing tensor named.
TEST(HfCli, ShortConvWithoutItsTensorsIsNamed) {
  const DamagedFixture f("hf_gsa");
  f.SetConfig("use_short_conv", true);
  ExpectOneLineError(RunCli("info --model " + f.dir()),
                     {"model.layers.0.attn.q_conv1d.weight", "not found"});
}

TEST(HfCli, WrongShapeIsNamed) {
  const DamagedFixture f("hf_gsa");
  // [32, 64] -> [64, 32]: the same bytes, the wrong shape.
  f.EditHeader("model.safetensors", [](json& header) {
    header["model.layers.0.attn.f_proj.weight"]["shape"] = {64, 32};
  });
  ExpectOneLineError(RunCli("info --model " + f.dir()),
                     {"model.safetensors", "model.layers.0.attn.f_proj.weight", "[32, 64]"});
}

TEST(HfCli, UnsupportedConfigFieldsAreNamed) {
  const struct {
    const char* fixture;
    const char* key;
    json value;
  } cases[] = {
      {"hf_gated_deltanet", "num_v_heads", 3},
      {"hf_gla", "attn", {{"layers", {1}}, {"num_heads", 4}, {"window_size", 512}}},
      {"hf_gsa", "hidden_act", "powlu"},
      {"hf_llama", "rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
      {"hf_llama", "hidden_act", "gelu"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    const DamagedFixture f(c.fixture);
    f.SetConfig(c.key, c.value);
    ExpectOneLineError(RunCli("info --model " + f.dir()), {"config.json", c.key});
  }
}

TEST(HfCli, IndexNamingAMissingShard) {
  const DamagedFixture f("hf_gsa_sharded_bf16");
  fs::remove(f.file("model-00003-of-00003.safetensors"));
  ExpectOneLineError(RunCli("info --model " + f.dir()),
                     {"model.safetensors.index.json", "model-00003-of-00003.safetensors"});
}

TEST(HfCli, PytorchBinOnlyIsRefused) {
  const DamagedFixture f("hf_llama");
  fs::remove(f.file("model.safetensors"));
  WriteFile(f.file("pytorch_model.bin"), "PK\x03\x04 not read");
  ExpectOneLineError(RunCli("info --model " + f.dir()), {f.dir(), "pytorch_model.bin"});
}

// A small SentencePiece-style BPE tokenizer.json: <unk> <s> </s>, the metaspace, "▁h" and
// the letters (31 pieces, fewer than hf_llama's vocab_size), no post-processor.
json HfCliSmallTokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"\u2581h", 4}};
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = static_cast<int>(vocab.size());
  json added = json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", id == 0   ? "<unk>"
                                 : id == 1 ? "<s>"
                                           : "</s>"},
                     {"special", true},
                     {"normalized", false}});
  }
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  const json tokenizer = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", replace},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"vocab", vocab}, {"merges", {"\u2581 h"}}}},
      {"decoder", {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}}}};
  return tokenizer;
}

// A tokenizer.json alone (a small SentencePiece-style BPE, fewer pieces than vocab_size)
// serves: info names it, generate tokenizes the prompt and decodes with it.
TEST(HfCli, TokenizerJsonAloneServes) {
  const DamagedFixture f("hf_llama");
  WriteFile(f.file("tokenizer.json"), HfCliSmallTokenizer().dump());
  const CliResult info = RunCli("info --model " + f.dir());
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(
      info.output.find("tokenizer: tokenizer.json, 31 pieces (vocab_size 96: 65 padding ids)"),
      std::string::npos)
      << info.output;
  const CliResult generated =
      RunCli("generate --prompt \"hi there\" --max-tokens 3 --model " + f.dir());
  EXPECT_EQ(generated.exit_code, 0) << generated.output;
}

// eval scores each line with bos first only where the model's tokenizer adds one, the ids
// /tokenize gives for it (`tokenize --lines`): tokenizer_config.json's add_bos_token true, then
// false, over the same three lines in one chunk.
TEST(HfCli, EvalPutsBosWhereTheTokenizerAddsOne) {
  const DamagedFixture f("hf_llama");
  WriteFile(f.file("tokenizer.json"), HfCliSmallTokenizer().dump());
  const std::string text = f.file("lines.txt").string();
  WriteFile(text, "hi there\nthe cat\nhello world");
  for (const bool add_bos : {true, false}) {
    SCOPED_TRACE(add_bos ? "add_bos_token true" : "add_bos_token false");
    WriteFile(f.file("tokenizer_config.json"), json{{"add_bos_token", add_bos}}.dump());
    const CliResult lines =
        RunCli("tokenize --lines --json --model " + f.dir() + " --text-file " + text);
    ASSERT_EQ(lines.exit_code, 0) << lines.output;
    size_t ids = 0;
    int bos_first = 0;
    for (absl::string_view line : absl::StrSplit(lines.output, '\n', absl::SkipEmpty())) {
      const json line_ids = json::parse(line, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(line_ids.is_array() && !line_ids.empty()) << lines.output;
      ids += line_ids.size();
      if (line_ids[0] == 1) ++bos_first;  // config.json's bos_token_id
    }
    EXPECT_EQ(bos_first, add_bos ? 3 : 0) << lines.output;
    const CliResult eval =
        RunCli("eval --json --chunk 1000 --model " + f.dir() + " --text " + text);
    ASSERT_EQ(eval.exit_code, 0) << eval.output;
    const json result = json::parse(eval.output, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(result.is_object()) << eval.output;
    EXPECT_EQ(result["chunks"], 1);
    EXPECT_EQ(result["predicted_tokens"], ids - 1);  // all of the one chunk's tokens but its first
  }
}

// The tokenizer: a tokenizer.json alone whose model is not BPE is refused (naming the file and
// the field) by every command that loads one; a tokenizer with more pieces than vocab_size is
// refused naming both numbers.
TEST(HfCli, UnsupportedTokenizerJsonAndOversizedTokenizerAreRefused) {
  const DamagedFixture f("hf_llama");
  fs::remove(f.file("tokenizer.model"));
  WriteFile(f.file("tokenizer.json"),
            R"({"version": "1.0", "model": {"type": "Unigram", "vocab": []}})");
  for (const std::string command : {"info", "generate --prompt hi --max-tokens 2"}) {
    ExpectOneLineError(RunCli(command + " --model " + f.dir()),
                       {f.dir() + "/tokenizer.json", "model.type", "Unigram"});
  }
  fs::remove(f.file("tokenizer.json"));
  // The bundled LM tokenizer has 8000 pieces; the fixture's vocab_size is 96.
  fs::copy_file(std::string(ABCD_SOURCE_DIR) + "/models/tokenizers/lm.model",
                f.file("tokenizer.model"));
  ExpectOneLineError(RunCli("generate --prompt hi --max-tokens 2 --model " + f.dir()),
                     {f.dir() + "/tokenizer.model", "8000 pieces", "vocab_size 96"});
}

}  // namespace
