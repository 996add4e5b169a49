#include "tests/engine/fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/model/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/testing/read_file.h"

namespace abcd::testing {

std::string FixtureDir(const std::string& name) {
  return std::string(ABCD_FIXTURE_DIR) + "/golden/" + name;
}

std::vector<std::string> FixtureNames() {
  const nlohmann::json index = nlohmann::json::parse(
      ReadFile(std::string(ABCD_FIXTURE_DIR) + "/golden/index.json"), nullptr, false);
  std::vector<std::string> names;
  if (index.is_array()) {
    for (const auto& name : index) names.push_back(name.get<std::string>());
  }
  return names;
}

Golden LoadGolden(const std::string& name) {
  Golden golden;
  auto file = SafetensorsFile::Open(FixtureDir(name) + "/golden.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return golden;
  auto ints = [&](const char* tensor) {
    auto view = (*file)->Get(tensor);
    return view.ok() ? *ToInt32(**view) : std::vector<int32_t>{};
  };
  auto floats = [&](const char* tensor) {
    auto view = (*file)->Get(tensor);
    return view.ok() ? *ToFloat32(**view) : std::vector<float>{};
  };
  golden.prompt_ids = ints("prompt_ids");
  golden.source_ids = ints("source_ids");
  golden.decode_ids = ints("decode_ids");
  golden.prefill_logits = floats("prefill_logits");
  golden.decode_logits = floats("decode_logits");
  golden.encoder_output = floats("encoder_output");
  golden.greedy_ids = ints("greedy_ids");
  golden.greedy_logprobs = floats("greedy_logprobs");
  return golden;
}

float MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    const float diff = std::abs(a[i] - b[i]);
    if (std::isnan(diff)) return INFINITY;  // NaN never passes
    worst = std::max(worst, diff);
  }
  return worst;
}

std::vector<int32_t> SourceIds(int64_t length) {
  std::vector<int32_t> source;
  for (int64_t i = 0; i < length; ++i) source.push_back(static_cast<int32_t>(4 + (i * 7) % 90));
  return source;
}

int64_t SequenceBytesAfter(const Model& model, StatePool& pool, int64_t tokens) {
  auto id = pool.Acquire();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<DecodeRow> rows;
  for (int64_t t = 0; t < tokens; ++t) {
    rows.push_back({*id, static_cast<int32_t>(4 + t % 90), t + 1 == tokens});
  }
  std::vector<float> logits;
  EXPECT_TRUE(model.Decode(rows, pool, &logits).ok());
  for (float v : logits) EXPECT_TRUE(std::isfinite(v));
  auto bytes = pool.SequenceBytes(*id);
  EXPECT_TRUE(bytes.ok());
  pool.Release(*id);
  return *bytes;
}

}  // namespace abcd::testing
