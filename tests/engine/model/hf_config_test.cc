// Hugging Face config.json parsing (engine/model/hf_config.h): shapes derived as transformers
// and fla derive them, RoPE scaling, eos lists, and every refusal naming its key.
#include "engine/model/hf_config.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/model/model.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

using nlohmann::json;

json Llama() {
  return json::parse(R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "vocab_size": 320, "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2})");
}

json Gsa() {
  return json::parse(R"({"model_type": "gsa", "vocab_size": 320, "hidden_size": 64,
    "num_hidden_layers": 2, "num_heads": 4, "num_slots": 8, "expand_k": 1, "expand_v": 1,
    "intermediate_size": null, "hidden_ratio": 4, "gate_logit_normalizer": 8,
    "feature_map": "swish", "use_short_conv": false, "norm_eps": 1e-6})");
}

// fla-hub style Gated DeltaNet (fla's config class defaults, small sizes).
json GatedDeltaNet() {
  return json::parse(R"({"model_type": "gated_deltanet", "vocab_size": 320,
    "hidden_size": 64, "num_hidden_layers": 2, "head_dim": 16, "num_heads": 2,
    "num_v_heads": null, "expand_v": 2, "use_gate": true, "use_short_conv": true,
    "conv_size": 4, "allow_neg_eigval": false, "norm_eps": 1e-6})");
}

absl::StatusOr<ModelConfig> Parse(const json& config, const std::string& generation = "",
                                  const std::string& tokenizer = "") {
  return ParseHfConfig(config, generation, tokenizer);
}

// The message ParseHfConfig refuses `config` with (model_config_test has ErrorFor).
std::string HfErrorFor(const json& config) {
  absl::StatusOr<ModelConfig> parsed = Parse(config);
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

TEST(HfConfig, LlamaShapesAndGqa) {
  absl::StatusOr<ModelConfig> c = Parse(Llama());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->is_hf());
  EXPECT_EQ(c->norm_kind, NormKind::kRmsNorm);
  EXPECT_EQ(c->activation, Activation::kSwiGlu);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_FALSE(c->scale_embeddings);
  const AttentionSpec& a = c->decoder_layers[1].attention;
  EXPECT_EQ(a.type, AttentionType::kSoftmax);
  EXPECT_EQ(a.heads, 4);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.key_dim, 16);
  EXPECT_TRUE(a.rope.enabled);
}

TEST(HfConfig, FlaIntermediateSizeRule) {
  EXPECT_EQ(FlaIntermediateSize(2048, 4), 5632);
  EXPECT_EQ(FlaIntermediateSize(2048, 2), 2816);
  EXPECT_EQ(FlaIntermediateSize(2560, 4), 6912);
  EXPECT_EQ(FlaIntermediateSize(64, 4), 256);
  absl::StatusOr<ModelConfig> c = Parse(Gsa());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->d_ff, 256);
  EXPECT_EQ(c->decoder_layers[0].attention.slots, 8);
  EXPECT_FLOAT_EQ(c->decoder_layers[0].attention.gate_normalizer, 8.0f);
}

TEST(HfConfig, Llama3RopeScalingByWavelengthBand) {
  json config = Llama();
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 64}};
  absl::StatusOr<ModelConfig> c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<float> inv = c->decoder_layers[0].attention.rope.InverseFrequencies(16);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const double base = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / 16.0));
    const double wavelen = 2 * M_PI / base;
    double expected = base;
    if (wavelen > 64.0) {
      expected = base / 8.0;
    } else if (wavelen >= 16.0) {
      const double s = (64.0 / wavelen - 1.0) / 3.0;
      expected = (1 - s) * base / 8.0 + s * base;
    }
    EXPECT_NEAR(inv[static_cast<size_t>(i)], expected, 1e-7 * std::fabs(expected)) << i;
  }
  // The three bands are all exercised by this configuration.
  EXPECT_LT(inv[7], static_cast<float>(1.0 / std::pow(10000.0, 14.0 / 16.0)));
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
}

TEST(HfConfig, RopeParametersWinOverTopLevelKeys) {
  json config = Llama();
  config["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 500000.0}};
  absl::StatusOr<ModelConfig> c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  const RopeSpec& rope = c->decoder_layers[0].attention.rope;
  EXPECT_DOUBLE_EQ(rope.theta, 500000.0);
  EXPECT_EQ(rope.scaling, RopeSpec::Scaling::kLinear);
  EXPECT_FLOAT_EQ(rope.InverseFrequencies(16)[0], 0.5f);
}

TEST(HfConfig, EosListsAndGenerationConfig) {
  json config = Llama();
  config["eos_token_id"] = {2, 7};
  absl::StatusOr<ModelConfig> c = Parse(config, R"({"eos_token_id": [2, 9], "bos_token_id": 5})",
                                        R"({"add_bos_token": false})");
  ASSERT_TRUE(c.ok()) << c.status();
  // generation_config.json's bos_token_id is not the prompt's (transformers reads it only to
  // start generate() without input ids): config.json's stands.
  EXPECT_EQ(c->bos_id, 1);
  EXPECT_EQ(c->eos_id, 2);
  EXPECT_TRUE(c->IsStopToken(7));
  EXPECT_TRUE(c->IsStopToken(9));
  EXPECT_FALSE(c->IsStopToken(3));
  EXPECT_FALSE(c->add_bos);
}

TEST(HfConfig, HybridAttnLayersAreSoftmax) {
  json config = Gsa();
  config["attn"] = {{"layers", {1}}, {"num_heads", 4}, {"num_kv_heads", 2}, {"rope_theta", 1e4}};
  absl::StatusOr<ModelConfig> c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[0].attention.type, AttentionType::kGsa);
  EXPECT_EQ(c->decoder_layers[1].attention.type, AttentionType::kSoftmax);
  EXPECT_EQ(c->decoder_layers[1].attention.kv_heads, 2);
  config["attn"]["layers"] = {5};
  EXPECT_NE(HfErrorFor(config).find("attn key \"layers\""), std::string::npos)
      << HfErrorFor(config);
}

TEST(HfConfig, RefusalsNameTheKey) {
  struct Case {
    json config;
    const char* key;
  };
  std::vector<Case> cases;
  auto with = [](json config, const std::string& key, const json& value) {
    config[key] = value;
    return config;
  };
  cases.push_back({with(with(Gsa(), "use_short_conv", true), "conv_size", 0), "conv_size"});
  cases.push_back({with(GatedDeltaNet(), "num_v_heads", 3), "num_v_heads"});
  cases.push_back({with(GatedDeltaNet(), "expand_v", 1.3), "expand_v"});
  cases.push_back({with(Gsa(), "hidden_act", "powlu"), "hidden_act"});
  cases.push_back({with(Gsa(), "elementwise_affine", false), "elementwise_affine"});
  cases.push_back({with(Gsa(), "attnres_block_size", 4), "attnres_block_size"});
  cases.push_back({with(Gsa(), "expand_v", 2), "expand_v"});
  cases.push_back({with(Gsa(), "feature_map", "elu"), "feature_map"});
  cases.push_back({with(Gsa(), "model_type", "mamba"), "model_type"});
  cases.push_back(
      {with(Llama(), "rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4}}), "rope_type"});
  cases.push_back(
      {with(Llama(), "rope_scaling", json{{"type", "dynamic"}, {"factor", 4}}), "rope_type"});
  cases.push_back({with(Llama(), "num_key_value_heads", 3), "num_key_value_heads"});
  cases.push_back({with(Llama(), "hidden_act", "gelu"), "hidden_act"});
  cases.push_back({with(Llama(), "hidden_size", 1000000000), "hidden_size"});
  json hybrid = Gsa();
  hybrid["attn"] = {{"layers", {0}}, {"num_heads", 4}, {"window_size", 512}};
  cases.push_back({hybrid, "window_size"});
  for (const Case& c : cases) {
    const std::string error = HfErrorFor(c.config);
    EXPECT_NE(error.find(absl::StrCat("\"", c.key, "\"")), std::string::npos)
        << c.key << ": " << error;
  }
}

// use_short_conv gives gsa, gla and hgrn2 conv_size taps (default 4); retnet ignores it as fla
// does; gated_deltanet convolves by default.
TEST(HfConfig, ShortConvolutionsAndGatedDeltaNet) {
  json gsa = Gsa();
  gsa["use_short_conv"] = true;
  absl::StatusOr<ModelConfig> c = Parse(gsa);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[1].attention.conv_size, 4);
  gsa["conv_size"] = 3;
  c = Parse(gsa);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[0].attention.conv_size, 3);
  EXPECT_NE(DescribeAttention(c->decoder_layers[0].attention).find("short_conv=3"),
            std::string::npos);
  gsa["use_short_conv"] = false;
  c = Parse(gsa);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[0].attention.conv_size, 0);
  json retnet = Gsa();
  retnet["model_type"] = "retnet";
  retnet.erase("feature_map");
  retnet["use_short_conv"] = true;
  c = Parse(retnet);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[0].attention.conv_size, 0);

  c = Parse(GatedDeltaNet());
  ASSERT_TRUE(c.ok()) << c.status();
  const AttentionSpec& a = c->decoder_layers[1].attention;
  EXPECT_EQ(a.type, AttentionType::kGatedDelta);
  EXPECT_EQ(a.heads, 2);     // value heads
  EXPECT_EQ(a.kv_heads, 2);  // q/k heads
  EXPECT_EQ(a.key_dim, 16);
  EXPECT_EQ(a.value_dim, 32);
  EXPECT_EQ(a.conv_size, 4);
  EXPECT_TRUE(a.output_gate);
  EXPECT_FALSE(a.allow_neg_eigval);
  EXPECT_EQ(c->d_ff, 256);
  json gva = GatedDeltaNet();
  gva["num_v_heads"] = 4;
  gva["use_short_conv"] = false;
  gva["use_gate"] = false;
  gva["allow_neg_eigval"] = true;
  gva["expand_v"] = 1.5;
  c = Parse(gva);
  ASSERT_TRUE(c.ok()) << c.status();
  const AttentionSpec& g = c->decoder_layers[0].attention;
  EXPECT_EQ(g.heads, 4);
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.value_dim, 24);
  EXPECT_EQ(g.conv_size, 0);
  EXPECT_FALSE(g.output_gate);
  EXPECT_TRUE(g.allow_neg_eigval);
}

// Qwen2.5-0.5B's config.json (model_type qwen2): tied, theta 1e6, a sliding_window that
// use_sliding_window false leaves unused.
json Qwen2() {
  return json::parse(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

// Qwen3-0.6B's config.json: head_dim 128 with hidden_size 1024 and 16 heads.
json Qwen3() {
  return json::parse(R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "use_sliding_window": false,
    "vocab_size": 151936})");
}

TEST(HfConfig, Qwen2HasQkvBiasesAndNoOutputBias) {
  absl::StatusOr<ModelConfig> c = Parse(Qwen2());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->eos_id, 151643);
  const AttentionSpec& a = c->decoder_layers[23].attention;
  EXPECT_EQ(a.type, AttentionType::kSoftmax);
  EXPECT_EQ(a.heads, 14);
  EXPECT_EQ(a.kv_heads, 2);
  EXPECT_EQ(a.key_dim, 64);
  EXPECT_TRUE(a.qkv_bias);
  EXPECT_FALSE(a.o_bias);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_DOUBLE_EQ(a.rope.theta, 1e6);
  EXPECT_FALSE(c->hf_mlp_bias);
  // attention_bias is not a Qwen2 key: the biases are there whatever it says.
  json config = Qwen2();
  config["attention_bias"] = false;
  c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->decoder_layers[0].attention.qkv_bias);
}

TEST(HfConfig, Qwen3HasPerHeadQkNormsAndAnExplicitHeadDim) {
  absl::StatusOr<ModelConfig> c = Parse(Qwen3());
  ASSERT_TRUE(c.ok()) << c.status();
  const AttentionSpec& a = c->decoder_layers[0].attention;
  EXPECT_EQ(a.heads, 16);
  EXPECT_EQ(a.kv_heads, 8);
  EXPECT_EQ(a.key_dim, 128);  // not 1024 / 16
  EXPECT_TRUE(a.qk_norm);
  EXPECT_FLOAT_EQ(a.norm_eps, 1e-6f);
  EXPECT_FALSE(a.qkv_bias);
  EXPECT_FALSE(a.o_bias);
  EXPECT_EQ(DescribeAttention(a),
            "softmax(heads=16, kv_heads=8, key_dim=128, qk_norm, rope theta=1e+06)");
  json config = Qwen3();
  config["attention_bias"] = true;
  config.erase("head_dim");  // Qwen3Config's default: 128
  c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->decoder_layers[0].attention.qkv_bias);
  EXPECT_TRUE(c->decoder_layers[0].attention.o_bias);
  EXPECT_EQ(c->decoder_layers[0].attention.key_dim, 128);
}

TEST(HfConfig, QwenSlidingWindowsFollowTransformers) {
  for (const json& base : {Qwen2(), Qwen3()}) {
    const int layers = base["num_hidden_layers"];
    json config = base;
    config["use_sliding_window"] = true;
    config["sliding_window"] = 4096;
    config["max_window_layers"] = 20;  // layers 20.. slide
    absl::StatusOr<ModelConfig> c = Parse(config);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int i = 0; i < layers; ++i) {
      const AttentionSpec& a = c->decoder_layers[static_cast<size_t>(i)].attention;
      EXPECT_EQ(a.type, i >= 20 ? AttentionType::kWindow : AttentionType::kSoftmax) << i;
      EXPECT_EQ(a.window, i >= 20 ? 4096 : 0) << i;
      EXPECT_EQ(a.qk_norm, base["model_type"] == "qwen3");
    }
    // layer_types (transformers >= 4.53) wins over max_window_layers.
    config["layer_types"] = json::array();
    for (int i = 0; i < layers; ++i) {
      config["layer_types"].push_back(i == 3 ? "sliding_attention" : "full_attention");
    }
    c = Parse(config);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->decoder_layers[3].attention.window, 4096);
    EXPECT_EQ(c->decoder_layers[20].attention.type, AttentionType::kSoftmax);
    // use_sliding_window false: sliding_window is unused, a sliding layer has no window.
    config["use_sliding_window"] = false;
    EXPECT_NE(HfErrorFor(config).find("\"layer_types[3]\": \"sliding_attention\" needs"),
              std::string::npos);
    config["layer_types"][3] = "chunked_attention";
    config["use_sliding_window"] = true;
    EXPECT_NE(HfErrorFor(config).find("\"layer_types[3]\""), std::string::npos);
    config.erase("layer_types");
    config["use_sliding_window"] = false;  // the published configs: full attention everywhere
    c = Parse(config);
    ASSERT_TRUE(c.ok()) << c.status();
    for (const LayerSpec& layer : c->decoder_layers) {
      EXPECT_EQ(layer.attention.type, AttentionType::kSoftmax);
    }
    config["use_sliding_window"] = true;
    config["sliding_window"] = 0;
    EXPECT_NE(HfErrorFor(config).find("\"sliding_window\""), std::string::npos);
  }
}

TEST(HfConfig, MistralSlidingWindowIsAWindowOfItsKeyValueHeads) {
  json config = Llama();
  config["model_type"] = "mistral";
  config["sliding_window"] = 4096;
  absl::StatusOr<ModelConfig> c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  const AttentionSpec& a = c->decoder_layers[1].attention;
  EXPECT_EQ(a.type, AttentionType::kWindow);
  EXPECT_EQ(a.window, 4096);
  EXPECT_TRUE(a.bounded());
  EXPECT_EQ(DescribeAttention(a),
            "window(window=4096, heads=4, kv_heads=2, key_dim=16, rope theta=10000)");
  config["sliding_window"] = nullptr;  // Mistral 7B v0.2 on: full attention
  c = Parse(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decoder_layers[0].attention.type, AttentionType::kSoftmax);
  config["sliding_window"] = 0;
  EXPECT_NE(HfErrorFor(config).find("\"sliding_window\""), std::string::npos);
  config["model_type"] = "llama";  // not a Llama key: ignored
  EXPECT_TRUE(Parse(config).ok());
}

TEST(HfConfig, HugeWidthIsRefusedAtOnce) {
  json config = Llama();
  config["hidden_size"] = 1000000000;
  config["intermediate_size"] = 1000000000;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(Parse(config).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

// An abcd-format config claiming a 1e9-wide model next to a small checkpoint fails on the first
// tensor's shape, in well under a second and without allocating gigabytes (the sinusoidal
// table of d/2 doubles is built only after every tensor matched).
TEST(ModelLoad, HugeConfigIsRefusedBeforeAllocating) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "abcd_huge_config_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path fixture = fs::path(ABCD_FIXTURE_DIR) / "golden" / "dec_softmax";
  fs::copy_file(fixture / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(fixture / "config.json");
  json config = json::parse(in);
  config["d_model"] = 1000000000;
  config["n_heads"] = 1;
  std::ofstream(dir / "config.json") << config.dump();
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir.string());
  const auto elapsed = std::chrono::steady_clock::now() - start;
  getrusage(RUSAGE_SELF, &after);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("embed.weight"), std::string::npos) << model.status();
  EXPECT_LT(elapsed, std::chrono::seconds(1));
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 100 * 1024);  // KiB: under 100 MB more
  fs::remove_all(dir);
}

}  // namespace
}  // namespace abcd
