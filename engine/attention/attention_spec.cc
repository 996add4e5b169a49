#include "engine/attention/attention_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace abcd {

absl::string_view AttentionTypeName(AttentionType type) {
  switch (type) {
    case AttentionType::kSoftmax:
      return "softmax";
    case AttentionType::kWindow:
      return "window";
    case AttentionType::kAbc:
      return "abc";
    case AttentionType::kRfa:
      return "rfa";
    case AttentionType::kT2r:
      return "t2r";
    case AttentionType::kElu:
      return "elu";
    case AttentionType::kTxl:
      return "txl";
    case AttentionType::kGsa:
      return "gsa";
    case AttentionType::kGla:
      return "gla";
    case AttentionType::kRetnet:
      return "retnet";
    case AttentionType::kHgrn2:
      return "hgrn2";
    case AttentionType::kGatedDelta:
      return "gated_deltanet";
  }
  return "?";
}

absl::string_view AbcControlName(AbcControl control) {
  switch (control) {
    case AbcControl::kExp:
      return "exp";
    case AbcControl::kSigmoid:
      return "sigmoid";
    case AbcControl::kRelu:
      return "relu";
    case AbcControl::kRandom:
      return "random";
    case AbcControl::kPosition:
      return "position";
    case AbcControl::kBlock:
      return "block";
    case AbcControl::kCluster:
      return "cluster";
  }
  return "?";
}

bool AbcControlIsLearned(AbcControl control) {
  return control == AbcControl::kExp || control == AbcControl::kSigmoid ||
         control == AbcControl::kRelu;
}

int AttentionSpec::FeatureDim(int head_dim) const {
  switch (type) {
    case AttentionType::kRfa:
      return kernel == RfaKernel::kGaussian ? 2 * features : features;
    case AttentionType::kT2r:
      return features;
    case AttentionType::kElu:
      return head_dim;
    default:
      return 0;
  }
}

std::vector<float> RopeSpec::InverseFrequencies(int dim) const {
  constexpr double kPi = 3.14159265358979323846;
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    double f = static_cast<double>(static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim))));
    if (scaling == Scaling::kLinear) {
      f /= factor;
    } else if (scaling == Scaling::kLlama3) {
      const double wavelen = 2.0 * kPi / f;
      const double low_wavelen = original_max_positions / low_freq_factor;
      const double high_wavelen = original_max_positions / high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= factor;
      } else if (wavelen >= high_wavelen) {
        const double s = (original_max_positions / wavelen - low_freq_factor) /
                         (high_freq_factor - low_freq_factor);
        f = (1.0 - s) * f / factor + s * f;
      }
    }
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv_freq;
}

namespace {

std::string DescribeShape(const AttentionSpec& spec) {
  if (spec.heads == 0) return "";
  std::string shape = absl::StrCat("heads=", spec.heads);
  if (spec.kv_heads != spec.heads) absl::StrAppend(&shape, ", kv_heads=", spec.kv_heads);
  absl::StrAppend(&shape, ", key_dim=", spec.key_dim);
  if (spec.value_dim != spec.key_dim) absl::StrAppend(&shape, ", value_dim=", spec.value_dim);
  if (spec.qk_norm) absl::StrAppend(&shape, ", qk_norm");
  if (spec.rope.enabled) absl::StrAppend(&shape, ", rope theta=", spec.rope.theta);
  if (spec.conv_size > 0) absl::StrAppend(&shape, ", short_conv=", spec.conv_size);
  if (spec.rope.scaling == RopeSpec::Scaling::kLinear) {
    absl::StrAppend(&shape, " linear x", spec.rope.factor);
  } else if (spec.rope.scaling == RopeSpec::Scaling::kLlama3) {
    absl::StrAppend(&shape, " llama3 x", spec.rope.factor);
  }
  return shape;
}

absl::string_view FeatureMapName(MixerFeatureMap map) {
  switch (map) {
    case MixerFeatureMap::kSwish:
      return "swish";
    case MixerFeatureMap::kRelu:
      return "relu";
    case MixerFeatureMap::kT2r:
      return "t2r";
    case MixerFeatureMap::kNone:
      break;
  }
  return "none";
}

}  // namespace

std::string DescribeAttention(const AttentionSpec& spec) {
  if (spec.gmat_chunk >= 0) return absl::StrCat("gmat(chunk=", spec.gmat_chunk, ")");
  const std::string name(AttentionTypeName(spec.type));
  switch (spec.type) {
    case AttentionType::kSoftmax:
      if (spec.heads > 0) return absl::StrCat(name, "(", DescribeShape(spec), ")");
      return name;
    case AttentionType::kGsa:
      return absl::StrCat(name, "(", DescribeShape(spec), ", slots=", spec.slots,
                          ", normalizer=", spec.gate_normalizer,
                          ", feature_map=", FeatureMapName(spec.feature_map), ")");
    case AttentionType::kGla:
      return absl::StrCat(name, "(", DescribeShape(spec), ", gate_rank=", spec.gate_rank,
                          spec.output_gate ? ", output gate" : "",
                          spec.feature_map != MixerFeatureMap::kNone
                              ? absl::StrCat(", feature_map=", FeatureMapName(spec.feature_map))
                              : "",
                          spec.has_clamp ? absl::StrCat(", clamp_min=", spec.clamp_min) : "", ")");
    case AttentionType::kRetnet:
      return absl::StrCat(name, "(", DescribeShape(spec), spec.output_gate ? ", output gate" : "",
                          ")");
    case AttentionType::kHgrn2:
      return absl::StrCat(name, "(", DescribeShape(spec), ")");
    case AttentionType::kGatedDelta:
      return absl::StrCat(name, "(", DescribeShape(spec), spec.output_gate ? ", output gate" : "",
                          spec.allow_neg_eigval ? ", negative eigenvalues" : "", ")");
    case AttentionType::kWindow:
      if (spec.heads > 0) {  // Hugging Face (Mistral's sliding_window)
        return absl::StrCat(name, "(window=", spec.window, ", ", DescribeShape(spec), ")");
      }
      if (spec.dilation != 1) {
        return absl::StrCat(name, "(window=", spec.window, ", dilation=", spec.dilation, ")");
      }
      return absl::StrCat(name, "(window=", spec.window, ")");
    case AttentionType::kAbc: {
      std::string control;  // exp (the default) is not shown
      if (spec.control == AbcControl::kRandom) {
        control = absl::StrCat(", control=random(seed=", spec.seed, ", ",
                               spec.reduce == AbcReduce::kSum ? "sum" : "mean", ")");
      } else if (spec.control == AbcControl::kPosition) {
        control = absl::StrCat(", control=position(max_positions=", spec.max_positions, ")");
      } else if (spec.control == AbcControl::kBlock) {
        control = absl::StrCat(", control=block(block=", spec.block, ")");
      } else if (spec.control != AbcControl::kExp) {
        control = absl::StrCat(", control=", AbcControlName(spec.control));
      }
      return absl::StrCat(name, "(slots=", spec.slots,
                          spec.shared_control ? ", shared control" : "", control, ")");
    }
    case AttentionType::kRfa:
      return absl::StrCat(name, "(features=", spec.features, ", ",
                          spec.kernel == RfaKernel::kGaussian ? "gaussian" : "arccos",
                          spec.gate ? ", gated" : "", ")");
    case AttentionType::kT2r:
      return absl::StrCat(name, "(features=", spec.features, ")");
    case AttentionType::kElu:
      return name;
    case AttentionType::kTxl:
      return absl::StrCat(name, "(memory=", spec.memory, ", clamp_len=", spec.clamp_len,
                          spec.ring_format == KvFormat::kF32
                              ? ""
                              : absl::StrCat(", ", KvFormatName(spec.ring_format), " ring"),
                          ")");
  }
  return name;
}

}  // namespace abcd
