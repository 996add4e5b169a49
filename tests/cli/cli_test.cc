// abcd-cli end to end: `info` and `generate --json` on the small untrained model (passed with
// --model so the expected sizes hold whatever the compiled default is), plus `eval`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/cli/cli_runner.h"

namespace {

using Result = abcd::testing::CliResult;
using abcd::testing::RunCli;

// The small untrained decoder-only model, named explicitly so these expectations do not depend
// on ABCD_DEFAULT_MODEL_DIR.
const std::string kUntrainedModelArg =
    std::string(" --model ") + ABCD_SOURCE_DIR + "/models/checkpoints/abc-lm-untrained";

TEST(Cli, InfoPrintsLayersAndStateBytes) {
  const Result r = RunCli("info" + kUntrainedModelArg);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("decoder.layers.0  self  abc(slots=32)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("state per sequence: 133120 bytes fixed"), std::string::npos) << r.output;
}

// abc control (issue 15): info names each layer's control and the state bytes it costs
// (random/mean: H n (2 dh + 1) floats, random/sum: H n 2 dh).
TEST(Cli, InfoShowsAbcControlAndStateBytes) {
  const Result r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
                          "/tests/fixtures/golden/dec_abc_random");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("abc(slots=4, control=random(seed=1234, mean)) 1088 bytes"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("abc(slots=6, control=random(seed=99, sum)) 1536 bytes"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("state per sequence: 2624 bytes fixed"), std::string::npos) << r.output;
}

// position (sum: H n 2 dh floats, one linformer table for the stack), block (H n 2 dh) and
// cluster (mean: H n (2 dh + 1)) show their control and state bytes.
TEST(Cli, InfoShowsPositionBlockClusterControls) {
  const struct {
    const char* fixture;
    const char* layer;
    const char* total;
  } cases[] = {
      {"dec_abc_position", "abc(slots=4, control=position(max_positions=64)) 1024 bytes",
       "state per sequence: 2048 bytes fixed"},
      {"dec_abc_block", "abc(slots=3, control=block(block=4)) 768 bytes",
       "state per sequence: 1280 bytes fixed"},
      {"dec_abc_cluster", "abc(slots=4, control=cluster)      1088 bytes",
       "state per sequence: 2176 bytes fixed"},
  };
  for (const auto& c : cases) {
    const Result r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
                            "/tests/fixtures/golden/" + c.fixture);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(c.layer), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.total), std::string::npos) << r.output;
  }
}

// Linformer in encoder and cross attention (issue 15): info shows the cross memory's fixed bytes
// (H n 2 dh floats whatever the source) and the source limit of the position tables.
TEST(Cli, InfoShowsPositionCrossStateBytesAndSourceLimit) {
  const Result r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
                          "/tests/fixtures/golden/encdec_abc_position");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line :
       {"self abc(slots=3, control=position(max_positions=16))",
        "cross abc(slots=5, control=position(max_positions=12)) 1280 bytes (fixed)",
        "state per sequence: 4672 bytes fixed",
        "decoder positions: at most 64 (abc position table)",
        "source: at most 12 tokens with eos (abc position tables)"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
}

// GMAT (issue 16): info names the gmat layers and shows the cross state of output "memory" as
// fixed bytes (M rows x 2 x d_model x 4 per softmax cross layer: 4 x 2 x 32 x 4 = 1024).
TEST(Cli, InfoShowsGmatEncoderAndFixedCrossBytes) {
  Result r =
      RunCli(std::string("info --model ") + ABCD_SOURCE_DIR + "/tests/fixtures/golden/encdec_gmat");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("encoder.layers.0  self gmat(chunk=0)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gmat: 4 memory tokens, output memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1024 bytes (4 GMAT memory rows, any source length)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("+ 2048 bytes GMAT cross memory"), std::string::npos) << r.output;
  r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
             "/tests/fixtures/golden/encdec_gmat_chunk");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gmat(chunk=4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("256 bytes per source token + 768 bytes"), std::string::npos) << r.output;
}

// Feature-map cross attention and the dilated window (issue 15): info shows each layer's state
// bytes. rfa cross: H F (dh + 1) floats whatever the source (F = 2D gaussian, D arccos);
// dilated window: 2 ((n - 1) d + 1) d_model floats.
TEST(Cli, InfoShowsCrossAndDilatedWindowStateBytes) {
  Result r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
                    "/tests/fixtures/golden/encdec_rfa_cross");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cross rfa(features=8, gaussian)          2304 bytes (fixed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("cross rfa(features=6, arccos)            864 bytes (fixed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("state per sequence: 7776 bytes fixed"), std::string::npos) << r.output;
  r = RunCli(std::string("info --model ") + ABCD_SOURCE_DIR +
             "/tests/fixtures/golden/dec_window_dilated");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("window(window=4, dilation=2)       1792 bytes (fixed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("state per sequence: 4608 bytes fixed"), std::string::npos) << r.output;
}

// Transformer-XL (issue 16): info shows each txl layer's ring, 2 (M + 1) d_model values, fp32
// by default and bf16 with --kv-cache-format bf16 (half the bytes).
TEST(Cli, InfoShowsTxlRingBytes) {
  const std::string model =
      std::string(" --model ") + ABCD_SOURCE_DIR + "/tests/fixtures/golden/dec_txl";
  Result r = RunCli("info" + model);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("txl(memory=6, clamp_len=4)         1792 bytes (fixed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("state per sequence: 4352 bytes fixed"), std::string::npos) << r.output;
  r = RunCli("info" + model + " --kv-cache-format bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("txl(memory=6, clamp_len=4, bf16 ring) 896 bytes (fixed)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("state per sequence: 2176 bytes fixed"), std::string::npos) << r.output;
}

// With no --model, `info` loads the compiled default model, whichever it is.
TEST(Cli, InfoWithoutModelUsesTheDefault) {
  const Result r = RunCli("info");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("state per sequence:"), std::string::npos) << r.output;
}

TEST(Cli, GenerateJsonIsReproducibleAndReportsState) {
  const std::string args =
      "generate --prompt 'free software' --max-tokens 12 --temperature 0.8 --top-k 50 "
      "--top-p 0.95 --seed 5 --ignore-eos --json" +
      kUntrainedModelArg;
  const Result first = RunCli(args);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::vector<std::string> lines = absl::StrSplit(first.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 13u) << first.output;  // 12 tokens + summary
  const auto last = nlohmann::json::parse(lines.back());
  EXPECT_EQ(last["token_ids"].size(), 12u);
  EXPECT_EQ(last["finish_reason"], "length");
  EXPECT_EQ(last["state_bytes"], 133120);
  std::string streamed;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    const auto token = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(token["token_id"], last["token_ids"][i]);
    streamed += token["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, last["text"]);
  EXPECT_EQ(RunCli(args).output, first.output);  // same seed, same tokens
}

TEST(Cli, BadArgumentsNameTheOption) {
  Result r = RunCli("generate --prompt hi --max-tokens -3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--max-tokens"), std::string::npos) << r.output;
  r = RunCli("generate --prompt hi --top-p 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("top_p"), std::string::npos) << r.output;
  r = RunCli("generate --prompt hi --bogus 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--bogus"), std::string::npos) << r.output;
  r = RunCli("info --model /nonexistent");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/config.json"), std::string::npos) << r.output;
}

// The repository root, with a trailing slash. (Not from __FILE__: with ccache's
// CCACHE_BASEDIR the compiler sees a relative path.)
std::string SourceDir() { return std::string(ABCD_SOURCE_DIR) + "/"; }

// `abcd-cli eval` must reproduce the PyTorch reference perplexity (same chunking) within 0.5%.
TEST(Cli, EvalPerplexityMatchesPytorchReference) {
  const std::string model = SourceDir() + "models/checkpoints/abc-lm";
  const std::string text = SourceDir() + "tests/fixtures/eval/small.txt";
  const Result r = RunCli("eval --model " + model + " --text " + text + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto result = nlohmann::json::parse(r.output);
  // From the repository root:
  //   /usr/bin/python3 models/evaluate.py lm --model models/checkpoints/abc-lm
  //       --text tests/fixtures/eval/small.txt --json
  // -> {"perplexity": 185.062, "predicted_tokens": 394, "chunks": 4, "chunk": 128, ...}
  constexpr double kPytorchPerplexity = 185.062;
  EXPECT_EQ(result["predicted_tokens"], 394);
  EXPECT_EQ(result["chunks"], 4);
  EXPECT_NEAR(result["perplexity"].get<double>(), kPytorchPerplexity, 0.005 * kPytorchPerplexity)
      << r.output;
}

TEST(Cli, EvalRejectsEncoderDecoderAndMissingText) {
  Result r = RunCli("eval");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--text"), std::string::npos) << r.output;
  r = RunCli("eval --text /nonexistent/file.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/file.txt"), std::string::npos) << r.output;
  r = RunCli("eval --model " + SourceDir() + "models/checkpoints/abc-mt-untrained --text " +
             SourceDir() + "tests/fixtures/eval/small.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("decoder-only"), std::string::npos) << r.output;
}

// `translate` runs the server's Executor in-process: beam search on the untrained MT model
// returns a JSON summary whose token counts agree with max_tokens.
TEST(Cli, TranslateJsonThroughTheExecutor) {
  const Result r = RunCli("translate --model " + SourceDir() +
                          "models/checkpoints/abc-mt-untrained --text 'Open file' --beam-size 2 "
                          "--max-tokens 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto result = nlohmann::json::parse(r.output);
  EXPECT_GE(result["prompt_tokens"].get<int>(), 2) << r.output;  // pieces + eos
  EXPECT_GE(result["completion_tokens"].get<int>(), 1) << r.output;
  EXPECT_LE(result["completion_tokens"].get<int>(), 5) << r.output;
  EXPECT_EQ(result["beam_size"], 2);
  EXPECT_TRUE(result["translation"].is_string());
}

TEST(Cli, TranslateRejectsBadArgumentsAndDecoderOnlyModels) {
  Result r = RunCli("translate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--text"), std::string::npos) << r.output;
  r = RunCli("translate --text hi --beam-size 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--beam-size"), std::string::npos) << r.output;
  r = RunCli("translate --text hi --max-tokens 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--max-tokens"), std::string::npos) << r.output;
  r = RunCli("translate --text hi" + kUntrainedModelArg);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("encoder-decoder"), std::string::npos) << r.output;
}

// The shipped translation model, through the C++ engine, translates the two probe strings of
// models/README.md (greedy and beam 4). Retraining abc-en-de must keep these.
TEST(Cli, ShippedTranslationModelTranslatesProbes) {
  const std::string model = " --model " + SourceDir() + "models/checkpoints/abc-en-de";
  for (const char* beam : {"1", "4"}) {
    Result r = RunCli("translate --text 'Open file' --beam-size " + std::string(beam) + model);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "Datei öffnen\n") << "beam " << beam;
    r = RunCli("translate --text 'Save changes?' --beam-size " + std::string(beam) + model);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "Änderungen speichern?\n") << "beam " << beam;
  }
}

}  // namespace
