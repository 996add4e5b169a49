// libFuzzer target: config.json parsing (ParseModelConfig) on arbitrary text. An accepted config
// must satisfy what the model builder relies on.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "engine/model/model_config.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void CheckLayers(const std::vector<abcd::LayerSpec>& layers, int head_dim) {
  for (const abcd::LayerSpec& layer : layers) {
    ABCD_FUZZ_CHECK(!abcd::DescribeAttention(layer.attention).empty());
    ABCD_FUZZ_CHECK(layer.attention.FeatureDim(head_dim) >= 0);
    if (layer.cross_attention.has_value()) {
      ABCD_FUZZ_CHECK(!abcd::DescribeAttention(*layer.cross_attention).empty());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<abcd::ModelConfig> config = abcd::ParseModelConfig(text);
  if (!config.ok()) {
    ABCD_FUZZ_CHECK(!config.status().message().empty());
    return 0;
  }
  ABCD_FUZZ_CHECK(config->vocab_size > 0 && config->d_model > 0 && config->n_heads > 0);
  ABCD_FUZZ_CHECK(config->d_model % config->n_heads == 0 && config->head_dim() > 0);
  ABCD_FUZZ_CHECK(config->d_ff > 0);
  for (int id : {config->bos_id, config->eos_id, config->pad_id, config->unk_id}) {
    ABCD_FUZZ_CHECK(id >= 0 && id < config->vocab_size);
  }
  ABCD_FUZZ_CHECK(!config->decoder_layers.empty());
  ABCD_FUZZ_CHECK(config->is_encoder_decoder() || config->encoder_layers.empty());
  CheckLayers(config->decoder_layers, config->head_dim());
  CheckLayers(config->encoder_layers, config->head_dim());
  return 0;
}
