#include "engine/runtime/generator.h"

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd {

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
  }
  return "?";
}

absl::StatusOr<GenerateResult> Generate(const Model& model, const Tokenizer& tokenizer,
                                        StatePool& pool, absl::string_view prompt,
                                        const GenerateOptions& options,
                                        const TokenCallback& on_token) {
  const ModelConfig& config = model.config();
  if (config.is_encoder_decoder()) {
    return absl::FailedPreconditionError("generate needs a decoder-only model");
  }
  if (options.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 0, got ", options.max_tokens));
  }
  ABCD_RETURN_IF_ERROR(ValidateSamplingParams(options.sampling));
  GenerateResult result;
  result.prompt_ids.push_back(config.bos_id);
  ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> encoded, tokenizer.Encode(prompt));
  result.prompt_ids.insert(result.prompt_ids.end(), encoded.begin(), encoded.end());

  ABCD_ASSIGN_OR_RETURN(const SequenceId sequence, pool.Acquire());
  absl::Cleanup release = [&] { pool.Release(sequence); };

  std::vector<DecodeRow> rows;
  for (size_t i = 0; i < result.prompt_ids.size(); ++i) {
    rows.push_back({sequence, result.prompt_ids[i], i + 1 == result.prompt_ids.size()});
  }
  std::vector<float> logits;
  ABCD_RETURN_IF_ERROR(model.Decode(rows, pool, &logits));

  Sampler sampler(options.sampling);
  std::vector<int32_t> context = result.prompt_ids;
  while (static_cast<int>(result.token_ids.size()) < options.max_tokens) {
    const int32_t next = sampler.Sample(logits, context);
    if (next == config.eos_id && !options.ignore_eos) {
      result.finish_reason = FinishReason::kEos;
      break;
    }
    result.token_ids.push_back(next);
    context.push_back(next);
    ABCD_ASSIGN_OR_RETURN(std::string text, tokenizer.Decode(result.token_ids));
    // Stop strings may span token boundaries, so match against the whole text.
    size_t stop_at = std::string::npos;
    for (const std::string& stop : options.stop) {
      if (!stop.empty()) stop_at = std::min(stop_at, text.find(stop));
    }
    if (stop_at != std::string::npos) text.resize(stop_at);
    const size_t common =
        text.compare(0, result.text.size(), result.text) == 0 ? result.text.size() : 0;
    if (on_token) on_token(next, absl::string_view(text).substr(common));
    result.text = std::move(text);
    if (stop_at != std::string::npos) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int>(result.token_ids.size()) == options.max_tokens) break;
    logits.clear();
    const DecodeRow step{sequence, next, true};
    ABCD_RETURN_IF_ERROR(model.Decode({&step, 1}, pool, &logits));
  }
  ABCD_ASSIGN_OR_RETURN(result.state_bytes, pool.SequenceBytes(sequence));
  return result;
}

}  // namespace abcd
