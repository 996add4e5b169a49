// config.json validation: every bad field is reported by its JSON path.
#include "engine/model/model_config.h"

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace abcd {
namespace {

nlohmann::json ValidDecoder() {
  return nlohmann::json::parse(R"({
    "format_version": 1, "architecture": "decoder", "vocab_size": 100, "d_model": 16,
    "n_heads": 4, "d_ff": 32, "decoder_layers": [
      {"attention": {"type": "abc", "slots": 8}},
      {"attention": {"type": "rfa", "features": 4, "kernel": "arccos", "gate": true}}]})");
}

std::string ErrorFor(const nlohmann::json& config) {
  auto parsed = ParseModelConfig(config.dump());
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(ModelConfig, ParsesValidDecoder) {
  auto config = ParseModelConfig(ValidDecoder().dump());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim(), 4);
  EXPECT_EQ(config->decoder_layers[0].attention.slots, 8);
  EXPECT_EQ(config->decoder_layers[1].attention.kernel, RfaKernel::kArccos);
  EXPECT_FLOAT_EQ(config->decoder_layers[1].attention.eps, 1e-2f);
  EXPECT_EQ(DescribeAttention(config->decoder_layers[1].attention),
            "rfa(features=4, arccos, gated)");
}

struct BadCase {
  const char* json_pointer;
  nlohmann::json value;
  const char* expected;
};

TEST(ModelConfig, NamesTheBadField) {
  const BadCase cases[] = {
      {"/decoder_layers/1/attention/features", 0, "decoder_layers[1].attention.features"},
      {"/decoder_layers/0/attention/type", "lsh", "decoder_layers[0].attention.type"},
      {"/decoder_layers/0/attention/slots", "8", "decoder_layers[0].attention.slots"},
      {"/decoder_layers/1/attention/kernel", "laplace", "decoder_layers[1].attention.kernel"},
      {"/n_heads", 3, "n_heads"},
      {"/vocab_size", -1, "vocab_size"},
      {"/architecture", "encoder", "architecture"},
      {"/eos_id", 100, "eos_id"},
      {"/activation", "swish", "activation"},
      {"/layer_norm_eps", 0, "layer_norm_eps"},
      {"/decoder_layers", nlohmann::json::array(), "decoder_layers"},
      {"/decoder_layers/0/cross_attention",
       {{"type", "abc"}, {"slots", 2}},
       "decoder_layers[0].cross_attention"},
  };
  for (const BadCase& c : cases) {
    nlohmann::json config = ValidDecoder();
    config[nlohmann::json::json_pointer(c.json_pointer)] = c.value;
    EXPECT_NE(ErrorFor(config).find(c.expected), std::string::npos)
        << c.json_pointer << " -> " << ErrorFor(config);
  }
}

TEST(ModelConfig, RejectsMissingFieldsAndBadJson) {
  nlohmann::json config = ValidDecoder();
  config.erase("d_model");
  EXPECT_NE(ErrorFor(config).find("d_model"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig("{\"architecture\": ").ok());
  EXPECT_FALSE(ParseModelConfig("[1, 2]").ok());
}

TEST(ModelConfig, EncoderDecoderRules) {
  nlohmann::json config = ValidDecoder();
  config["architecture"] = "encoder-decoder";
  EXPECT_NE(ErrorFor(config).find("decoder_layers[0].cross_attention"), std::string::npos);
  config["decoder_layers"] = {{{"attention", {{"type", "window"}, {"window", 4}}},
                               {"cross_attention", {{"type", "abc"}, {"slots", 4}}}}};
  config["encoder_layers"] = {{{"attention", {{"type", "window"}, {"window", 4}}}}};
  EXPECT_NE(ErrorFor(config).find("encoder_layers[0].attention.type"), std::string::npos);
  config["encoder_layers"] = {{{"attention", {{"type", "softmax"}}}}};
  config["decoder_layers"][0]["cross_attention"] = {{"type", "window"}, {"window", 4}};
  EXPECT_NE(ErrorFor(config).find("decoder_layers[0].cross_attention.type"), std::string::npos);
  config["decoder_layers"][0]["cross_attention"] = {{"type", "softmax"}};
  EXPECT_TRUE(ParseModelConfig(config.dump()).ok());
}

TEST(ModelConfig, AbcControl) {
  nlohmann::json config = ValidDecoder();
  auto parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->decoder_layers[0].attention.control, AbcControl::kExp);  // the default
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[0].attention), "abc(slots=8)");
  config["decoder_layers"][0]["attention"]["control"] = "relu";
  parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decoder_layers[0].attention.control, AbcControl::kRelu);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[0].attention), "abc(slots=8, control=relu)");

  config["decoder_layers"][0]["attention"] = {
      {"type", "abc"}, {"slots", 8}, {"control", "random"}, {"seed", 42}};
  parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const AttentionSpec& random = parsed->decoder_layers[0].attention;
  EXPECT_EQ(random.seed, 42);
  EXPECT_EQ(random.reduce, AbcReduce::kMean);
  EXPECT_EQ(random.layer_id, 0);
  EXPECT_EQ(DescribeAttention(random), "abc(slots=8, control=random(seed=42, mean))");

  // Layer ids of the slot hash: decoder i, encoder 4096 + i, cross 8192 + i.
  nlohmann::json encdec = ValidDecoder();
  encdec["architecture"] = "encoder-decoder";
  const nlohmann::json abc = {{"type", "abc"}, {"slots", 2}};
  encdec["decoder_layers"] = {{{"attention", abc}, {"cross_attention", abc}},
                              {{"attention", abc}, {"cross_attention", abc}}};
  encdec["encoder_layers"] = {{{"attention", abc}}, {{"attention", abc}}};
  parsed = ParseModelConfig(encdec.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decoder_layers[1].attention.layer_id, 1);
  EXPECT_EQ(parsed->decoder_layers[1].cross_attention->layer_id, kAbcCrossLayerId + 1);
  EXPECT_EQ(parsed->encoder_layers[1].attention.layer_id, kAbcEncoderLayerId + 1);
}

TEST(ModelConfig, AbcControlNamesTheBadField) {
  const nlohmann::json random = {{"type", "abc"}, {"slots", 8}, {"control", "random"}, {"seed", 1}};
  struct Case {
    nlohmann::json attention;
    const char* field;
  };
  const Case cases[] = {
      {{{"type", "abc"}, {"slots", 8}, {"control", "tanh"}}, "attention.control"},
      {{{"type", "abc"}, {"slots", 8}, {"control", 1}}, "attention.control"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "random"}}, "attention.seed"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "random"}, {"seed", -1}}, "attention.seed"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "random"}, {"seed", 1.5}}, "attention.seed"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "random"}, {"seed", 1}, {"reduce", "max"}},
       "attention.reduce"},
      {{{"type", "abc"}, {"slots", 8}, {"seed", 1}}, "attention.seed"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "relu"}, {"reduce", "sum"}}, "attention.reduce"},
      {{{"type", "abc"},
        {"slots", 8},
        {"control", "random"},
        {"seed", 1},
        {"shared_control", true}},
       "attention.shared_control"},
      {{{"type", "softmax"}, {"control", "exp"}}, "attention.control"},
      {{{"type", "rfa"}, {"features", 4}, {"seed", 3}}, "attention.seed"},
  };
  for (const Case& c : cases) {
    nlohmann::json config = ValidDecoder();
    config["decoder_layers"][1]["attention"] = c.attention;
    const std::string expected = std::string("decoder_layers[1].") + c.field;
    EXPECT_NE(ErrorFor(config).find(expected), std::string::npos)
        << c.attention.dump() << " -> " << ErrorFor(config);
  }
  nlohmann::json config = ValidDecoder();
  config["decoder_layers"][1]["attention"] = random;
  EXPECT_TRUE(ParseModelConfig(config.dump()).ok());
}

// Issue 15 part 2: position (causal Linformer), block (compressive) and cluster controls.
TEST(ModelConfig, AbcPositionBlockCluster) {
  nlohmann::json config = ValidDecoder();
  EXPECT_EQ(ParseModelConfig(config.dump())->max_positions(), 0);  // unbounded
  const nlohmann::json position = {
      {"type", "abc"}, {"slots", 8}, {"control", "position"}, {"max_positions", 512}};
  config["decoder_layers"][0]["attention"] = position;
  config["decoder_layers"][1]["attention"] = {
      {"type", "abc"}, {"slots", 4}, {"control", "block"}, {"block", 16}};
  auto parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->max_positions(), 512);
  EXPECT_EQ(parsed->decoder_layers[0].attention.reduce, AbcReduce::kSum);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[0].attention),
            "abc(slots=8, control=position(max_positions=512))");
  EXPECT_EQ(parsed->decoder_layers[1].attention.block, 16);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[1].attention),
            "abc(slots=4, control=block(block=16))");
  config["decoder_layers"][1]["attention"] = {
      {"type", "abc"}, {"slots", 4}, {"control", "cluster"}};
  parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decoder_layers[1].attention.reduce, AbcReduce::kMean);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[1].attention),
            "abc(slots=4, control=cluster)");
  EXPECT_FALSE(AbcControlIsLearned(AbcControl::kCluster));

  struct Case {
    nlohmann::json attention;
    const char* field;
  };
  const Case cases[] = {
      {{{"type", "abc"}, {"slots", 8}, {"control", "position"}}, "attention.max_positions"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "position"}, {"max_positions", 0}},
       "attention.max_positions"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "block"}}, "attention.block"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "block"}, {"block", "x"}}, "attention.block"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "cluster"}, {"block", 4}}, "attention.block"},
      {{{"type", "abc"}, {"slots", 8}, {"max_positions", 4}}, "attention.max_positions"},
      {{{"type", "abc"}, {"slots", 8}, {"control", "cluster"}, {"shared_control", true}},
       "attention.shared_control"},
      // One linformer table per stack: every position layer has the same slots and N.
      {{{"type", "abc"}, {"slots", 8}, {"control", "position"}, {"max_positions", 256}},
       "attention.max_positions"},
      {{{"type", "window"}, {"window", 4}, {"block", 4}}, "attention.block"},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = ValidDecoder();
    bad["decoder_layers"][0]["attention"] = position;
    bad["decoder_layers"][1]["attention"] = c.attention;
    const std::string expected = std::string("decoder_layers[1].") + c.field;
    EXPECT_NE(ErrorFor(bad).find(expected), std::string::npos)
        << c.attention.dump() << " -> " << ErrorFor(bad);
  }
  // block is decoder self attention only; cluster (and position, see AbcPositionEncoderAndCross)
  // are allowed everywhere.
  nlohmann::json encdec = ValidDecoder();
  encdec["architecture"] = "encoder-decoder";
  const nlohmann::json cluster = {{"type", "abc"}, {"slots", 2}, {"control", "cluster"}};
  encdec["decoder_layers"] = {{{"attention", position}, {"cross_attention", cluster}}};
  encdec["encoder_layers"] = {{{"attention", cluster}}};
  ASSERT_TRUE(ParseModelConfig(encdec.dump()).ok()) << ParseModelConfig(encdec.dump()).status();
  encdec["decoder_layers"][0]["cross_attention"] = {
      {"type", "abc"}, {"slots", 2}, {"control", "block"}, {"block", 2}};
  EXPECT_NE(ErrorFor(encdec).find("decoder_layers[0].cross_attention.control"), std::string::npos)
      << ErrorFor(encdec);
  encdec["decoder_layers"][0]["cross_attention"] = cluster;
  encdec["encoder_layers"][0]["attention"] = {
      {"type", "abc"}, {"slots", 2}, {"control", "block"}, {"block", 2}};
  EXPECT_NE(ErrorFor(encdec).find("encoder_layers[0].attention.control"), std::string::npos)
      << ErrorFor(encdec);
}

// abc position (Linformer) in encoder self and cross attention: each stack has its own table
// (encoder.linformer, decoder.cross_linformer), so the layers sharing one must agree on slots and
// max_positions; the source limit is the smallest encoder / cross N.
TEST(ModelConfig, AbcPositionEncoderAndCross) {
  nlohmann::json config = ValidDecoder();
  config["architecture"] = "encoder-decoder";
  const auto position = [](int slots, int n) {
    return nlohmann::json{
        {"type", "abc"}, {"slots", slots}, {"control", "position"}, {"max_positions", n}};
  };
  const nlohmann::json softmax = {{"type", "softmax"}};
  config["encoder_layers"] = {{{"attention", position(3, 40)}}, {{"attention", softmax}}};
  config["decoder_layers"] = {
      {{"attention", position(4, 512)}, {"cross_attention", position(5, 32)}},
      {{"attention", softmax}, {"cross_attention", position(5, 32)}}};
  auto parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->max_positions(), 512);
  EXPECT_EQ(parsed->max_source_positions(), 32);
  EXPECT_EQ(parsed->decoder_layers[1].cross_attention->reduce, AbcReduce::kSum);
  EXPECT_EQ(DescribeAttention(*parsed->decoder_layers[1].cross_attention),
            "abc(slots=5, control=position(max_positions=32))");
  config["decoder_layers"][0]["cross_attention"] = softmax;
  config["decoder_layers"][1]["cross_attention"] = softmax;
  EXPECT_EQ(ParseModelConfig(config.dump())->max_source_positions(), 40);
  EXPECT_EQ(ParseModelConfig(ValidDecoder().dump())->max_source_positions(), 0);

  // Tables of different sizes within one stack are refused, naming the layer.
  config["decoder_layers"][0]["cross_attention"] = position(5, 32);
  config["decoder_layers"][1]["cross_attention"] = position(5, 16);
  EXPECT_NE(ErrorFor(config).find("decoder_layers[1].cross_attention.max_positions"),
            std::string::npos)
      << ErrorFor(config);
  EXPECT_NE(ErrorFor(config).find("cross_linformer"), std::string::npos) << ErrorFor(config);
  config["decoder_layers"][1]["cross_attention"] = position(6, 32);
  EXPECT_NE(ErrorFor(config).find("decoder_layers[1].cross_attention.max_positions"),
            std::string::npos)
      << ErrorFor(config);
  config["decoder_layers"][1]["cross_attention"] = position(5, 32);
  config["encoder_layers"][1]["attention"] = position(3, 20);
  EXPECT_NE(ErrorFor(config).find("encoder_layers[1].attention.max_positions"), std::string::npos)
      << ErrorFor(config);
  config["encoder_layers"][1]["attention"] = {
      {"type", "abc"}, {"slots", 3}, {"control", "position"}};
  EXPECT_NE(ErrorFor(config).find("encoder_layers[1].attention.max_positions"), std::string::npos)
      << ErrorFor(config);
}

// rfa / t2r / elu cross attention (issue 15): allowed with their self-attention fields, no gate.
TEST(ModelConfig, FeatureMapCrossAttention) {
  nlohmann::json config = ValidDecoder();
  config["architecture"] = "encoder-decoder";
  config["encoder_layers"] = {{{"attention", {{"type", "softmax"}}}}};
  const nlohmann::json crosses[] = {
      {{"type", "rfa"}, {"features", 8}, {"kernel", "gaussian"}},
      {{"type", "rfa"}, {"features", 8}, {"kernel", "arccos"}, {"gate", false}},
      {{"type", "t2r"}, {"features", 4}},
      {{"type", "elu"}, {"eps", 1e-5}},
  };
  for (const nlohmann::json& cross : crosses) {
    config["decoder_layers"] = {{{"attention", {{"type", "softmax"}}}, {"cross_attention", cross}}};
    auto parsed = ParseModelConfig(config.dump());
    ASSERT_TRUE(parsed.ok()) << cross.dump() << ": " << parsed.status();
    EXPECT_EQ(AttentionTypeName(parsed->decoder_layers[0].cross_attention->type),
              cross["type"].get<std::string>());
  }
  config["decoder_layers"] = {
      {{"attention", {{"type", "softmax"}}},
       {"cross_attention", {{"type", "rfa"}, {"features", 8}, {"gate", true}}}}};
  EXPECT_NE(ErrorFor(config).find("decoder_layers[0].cross_attention.gate"), std::string::npos)
      << ErrorFor(config);
  config["decoder_layers"][0]["cross_attention"] = {{"type", "t2r"}, {"features", 0}};
  EXPECT_NE(ErrorFor(config).find("decoder_layers[0].cross_attention.features"), std::string::npos);
}

// window `dilation` (issue 15): default 1, an integer >= 1, window attention only.
TEST(ModelConfig, WindowDilation) {
  nlohmann::json config = ValidDecoder();
  config["decoder_layers"][0]["attention"] = {{"type", "window"}, {"window", 4}};
  auto parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decoder_layers[0].attention.dilation, 1);
  EXPECT_EQ(parsed->decoder_layers[0].attention.WindowSpan(), 4);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[0].attention), "window(window=4)");
  config["decoder_layers"][0]["attention"]["dilation"] = 3;
  parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->decoder_layers[0].attention.WindowSpan(), 10);
  EXPECT_EQ(DescribeAttention(parsed->decoder_layers[0].attention), "window(window=4, dilation=3)");
  for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-2), nlohmann::json(1.5),
                                    nlohmann::json("2"), nlohmann::json(1 << 29)}) {
    config["decoder_layers"][0]["attention"]["dilation"] = bad;
    EXPECT_NE(ErrorFor(config).find("decoder_layers[0].attention.dilation"), std::string::npos)
        << bad.dump() << " -> " << ErrorFor(config);
  }
  config["decoder_layers"][0]["attention"] = {{"type", "abc"}, {"slots", 4}, {"dilation", 2}};
  EXPECT_NE(ErrorFor(config).find("decoder_layers[0].attention.dilation"), std::string::npos);
}

// Transformer-XL (issue 16): txl in decoder self attention only, memory and clamp_len required
// integers >= 1; model-level positional (sinusoidal | none) and norm (pre | post, post for decoder
// models only).
TEST(ModelConfig, TxlPositionalAndNorm) {
  nlohmann::json config = ValidDecoder();
  config["decoder_layers"][0]["attention"] = {{"type", "txl"}, {"memory", 64}, {"clamp_len", 32}};
  config["positional"] = "none";
  config["norm"] = "post";
  auto parsed = ParseModelConfig(config.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const AttentionSpec& txl = parsed->decoder_layers[0].attention;
  EXPECT_EQ(txl.type, AttentionType::kTxl);
  EXPECT_EQ(txl.memory, 64);
  EXPECT_EQ(txl.clamp_len, 32);
  EXPECT_TRUE(txl.bounded());
  EXPECT_EQ(DescribeAttention(txl), "txl(memory=64, clamp_len=32)");
  EXPECT_EQ(parsed->positional, Positional::kNone);
  EXPECT_EQ(parsed->norm, Norm::kPost);
  auto defaults = ParseModelConfig(ValidDecoder().dump());
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->positional, Positional::kSinusoidal);
  EXPECT_EQ(defaults->norm, Norm::kPre);

  const BadCase cases[] = {
      {"/decoder_layers/0/attention/memory", 0, "decoder_layers[0].attention.memory"},
      {"/decoder_layers/0/attention/memory", "64", "decoder_layers[0].attention.memory"},
      {"/decoder_layers/0/attention/clamp_len", 0, "decoder_layers[0].attention.clamp_len"},
      {"/decoder_layers/1/attention/memory", 4, "decoder_layers[1].attention.memory"},
      {"/positional", "learned", "\"positional\""},
      {"/norm", "sandwich", "\"norm\""},
  };
  for (const BadCase& c : cases) {
    nlohmann::json bad = config;
    bad[nlohmann::json::json_pointer(c.json_pointer)] = c.value;
    EXPECT_NE(ErrorFor(bad).find(c.expected), std::string::npos) << c.json_pointer;
  }
  nlohmann::json missing = config;
  missing["decoder_layers"][0]["attention"].erase("clamp_len");
  EXPECT_NE(ErrorFor(missing).find("decoder_layers[0].attention.clamp_len"), std::string::npos);

  // Encoder and cross attention refuse txl, naming the field; post-LN is decoder-only.
  nlohmann::json encdec = nlohmann::json::parse(R"({
    "format_version": 1, "architecture": "encoder-decoder", "vocab_size": 100, "d_model": 16,
    "n_heads": 4, "d_ff": 32,
    "encoder_layers": [{"attention": {"type": "softmax"}}],
    "decoder_layers": [{"attention": {"type": "softmax"}, "cross_attention": {"type": "softmax"}}]})");
  ASSERT_TRUE(ParseModelConfig(encdec.dump()).ok());
  const nlohmann::json txl_spec = {{"type", "txl"}, {"memory", 4}, {"clamp_len", 4}};
  nlohmann::json bad = encdec;
  bad["encoder_layers"][0]["attention"] = txl_spec;
  EXPECT_NE(ErrorFor(bad).find("encoder_layers[0].attention.type"), std::string::npos);
  bad = encdec;
  bad["decoder_layers"][0]["cross_attention"] = txl_spec;
  EXPECT_NE(ErrorFor(bad).find("decoder_layers[0].cross_attention.type"), std::string::npos);
  bad = encdec;
  bad["norm"] = "post";
  EXPECT_NE(ErrorFor(bad).find("\"norm\""), std::string::npos);
}

}  // namespace
}  // namespace abcd
