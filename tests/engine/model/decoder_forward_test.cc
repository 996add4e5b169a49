// The decoder's one block loop (engine/model/decoder_forward.h): the ops each block structure
// calls, in order, with their operands, and that a failing op stops the pass.
#include "engine/model/decoder_forward.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace abcd {
namespace {

std::string BufferName(DecoderBuffer buffer) {
  return buffer == DecoderBuffer::kResidual ? "x" : "n";
}

std::string NormName(BlockNorm norm) {
  switch (norm) {
    case BlockNorm::kAttention:
      return "ln1";
    case BlockNorm::kCross:
      return "lnc";
    case BlockNorm::kFeedForward:
      return "ln2";
  }
  return "?";
}

// Records every call as "op(layer:from>to)"; fails the call numbered `fail_at`.
class RecordingOps final : public DecoderOps {
 public:
  std::vector<std::string> calls;
  int fail_at = -1;

  absl::Status Embed() override { return Record("embed"); }
  absl::Status Norm(int layer, BlockNorm which, DecoderBuffer from, DecoderBuffer to) override {
    return Record(
        absl::StrCat(NormName(which), "(", layer, ":", BufferName(from), ">", BufferName(to), ")"));
  }
  absl::Status SelfAttention(int layer, DecoderBuffer from, DecoderBuffer into) override {
    return Record(absl::StrCat("attn(", layer, ":", BufferName(from), ">", BufferName(into), ")"));
  }
  absl::Status CrossAttention(int layer, DecoderBuffer from, DecoderBuffer into) override {
    return Record(absl::StrCat("cross(", layer, ":", BufferName(from), ">", BufferName(into), ")"));
  }
  absl::Status FeedForward(int layer, DecoderBuffer from, DecoderBuffer into) override {
    return Record(absl::StrCat("ffn(", layer, ":", BufferName(from), ">", BufferName(into), ")"));
  }
  absl::Status Output(DecoderBuffer output, bool final_norm) override {
    return Record(absl::StrCat("out(", BufferName(output), final_norm ? ",lnf" : "", ")"));
  }

 private:
  absl::Status Record(std::string call) {
    if (static_cast<int>(calls.size()) == fail_at) {
      return absl::InternalError(absl::StrCat("failed at ", call));
    }
    calls.push_back(std::move(call));
    return absl::OkStatus();
  }
};

ModelConfig BlocksConfig(int layers, Norm norm, bool cross) {
  ModelConfig config;
  config.norm = norm;
  for (int i = 0; i < layers; ++i) {
    LayerSpec layer;
    if (cross) layer.cross_attention = AttentionSpec{};
    config.decoder_layers.push_back(layer);
  }
  return config;
}

std::string CallsOf(const ModelConfig& config) {
  RecordingOps ops;
  EXPECT_TRUE(RunDecoder(config, ops).ok());
  return absl::StrJoin(ops.calls, " ");
}

TEST(DecoderForwardTest, PreNormBlocksAddEachSublayerToTheResidual) {
  EXPECT_EQ(CallsOf(BlocksConfig(2, Norm::kPre, false)),
            "embed ln1(0:x>n) attn(0:n>x) ln2(0:x>n) ffn(0:n>x) "
            "ln1(1:x>n) attn(1:n>x) ln2(1:x>n) ffn(1:n>x) out(x,lnf)");
}

TEST(DecoderForwardTest, CrossAttentionSitsBetweenSelfAttentionAndTheFeedForward) {
  EXPECT_EQ(CallsOf(BlocksConfig(1, Norm::kPre, true)),
            "embed ln1(0:x>n) attn(0:n>x) lnc(0:x>n) cross(0:n>x) ln2(0:x>n) ffn(0:n>x) "
            "out(x,lnf)");
}

TEST(DecoderForwardTest, PostNormBlocksNormaliseAfterEachResidualAndSkipTheFinalNorm) {
  EXPECT_EQ(CallsOf(BlocksConfig(2, Norm::kPost, false)),
            "embed attn(0:x>x) ln1(0:x>n) ffn(0:n>n) ln2(0:n>x) "
            "attn(1:x>x) ln1(1:x>n) ffn(1:n>n) ln2(1:n>x) out(x)");
}

TEST(DecoderForwardTest, AFailingOpStopsThePassWithItsError) {
  RecordingOps ops;
  ops.fail_at = 2;  // the first self attention
  const absl::Status status = RunDecoder(BlocksConfig(2, Norm::kPre, false), ops);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "failed at attn(0:n>x)");
  EXPECT_EQ(absl::StrJoin(ops.calls, " "), "embed ln1(0:x>n)");
}

}  // namespace
}  // namespace abcd
