#include "engine/runtime/generator.h"

#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/text_stream.h"

namespace abcd {

absl::StatusOr<GenerateResult> Generate(const Model& model, const Tokenizer& tokenizer,
                                        StatePool& pool, absl::string_view prompt,
                                        const GenerateOptions& options,
                                        const TokenCallback& on_token) {
  const ModelConfig& config = model.config();
  std::optional<CpuContext> own_context;
  if (options.context == nullptr) own_context.emplace(1);
  CpuContext& ctx = options.context != nullptr ? *options.context : *own_context;
  if (config.is_encoder_decoder()) {
    return absl::FailedPreconditionError("generate needs a decoder-only model");
  }
  if (options.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 0, got ", options.max_tokens));
  }
  ABCD_RETURN_IF_ERROR(ValidateSamplingParams(options.sampling));
  GenerateResult result;
  ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> encoded, tokenizer.Encode(prompt));
  if (config.add_bos || encoded.empty()) result.prompt_ids.push_back(config.bos_id);
  result.prompt_ids.insert(result.prompt_ids.end(), encoded.begin(), encoded.end());

  ABCD_ASSIGN_OR_RETURN(const SequenceId sequence, pool.Acquire());
  absl::Cleanup release = [&] { pool.Release(sequence); };

  std::vector<DecodeRow> rows;
  for (size_t i = 0; i < result.prompt_ids.size(); ++i) {
    rows.push_back({sequence, result.prompt_ids[i], i + 1 == result.prompt_ids.size()});
  }
  std::vector<float> logits;
  ABCD_RETURN_IF_ERROR(model.Decode(ctx, rows, pool, &logits));

  Sampler sampler(options.sampling);
  TextStream text(tokenizer, options.stop, result.prompt_ids);
  std::vector<int32_t> context = result.prompt_ids;
  while (static_cast<int>(result.token_ids.size()) < options.max_tokens) {
    const int32_t next = sampler.Sample(logits, context);
    if (config.IsStopToken(next) && !options.ignore_eos) {
      result.finish_reason = FinishReason::kEos;
      // Text held back as a possible stop-string prefix is final now.
      const std::string rest = text.Flush();
      if (on_token && !rest.empty()) on_token(next, rest);
      break;
    }
    result.token_ids.push_back(next);
    context.push_back(next);
    ABCD_ASSIGN_OR_RETURN(std::string released, text.Append(next));
    if (static_cast<int>(result.token_ids.size()) == options.max_tokens) released += text.Flush();
    if (on_token) on_token(next, released);
    if (text.stopped()) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int>(result.token_ids.size()) == options.max_tokens) break;
    logits.clear();
    const DecodeRow step{sequence, next, true};
    ABCD_RETURN_IF_ERROR(model.Decode(ctx, {&step, 1}, pool, &logits));
  }
  result.text = text.text();
  ABCD_ASSIGN_OR_RETURN(result.state_bytes, pool.SequenceBytes(sequence));
  return result;
}

}  // namespace abcd
