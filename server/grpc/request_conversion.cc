#include "server/grpc/request_conversion.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"

namespace abcd {
namespace {

constexpr int kDefaultMaxTokens = 16;
constexpr int kDefaultBeamSize = 4;
constexpr int kDefaultTranslateMaxTokens = 128;

}  // namespace

absl::StatusOr<GenerationRequest> ToGenerationRequest(const abcd::v1::GenerateRequest& in,
                                                      absl::Time deadline) {
  GenerationRequest out;
  if (!in.messages().empty()) {  // rendered by the caller (server/chat/chat_prompt.h)
    if (!in.prompt().empty() || !in.prompt_token_ids().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages must be empty when ", in.prompt().empty() ? "prompt_token_ids" : "prompt",
          " is given (one or the other)"));
    }
    if (!in.session_id().empty()) {
      return absl::InvalidArgumentError("session_id is not supported with messages");
    }
  } else if (in.has_add_generation_prompt()) {
    return absl::InvalidArgumentError("add_generation_prompt needs messages");
  }
  if (!in.prompt_token_ids().empty()) {
    if (!in.prompt().empty()) {
      return absl::InvalidArgumentError(
          "prompt_token_ids must be empty when prompt is given (one or the other)");
    }
    for (int i = 0; i < in.prompt_token_ids_size(); ++i) {
      if (in.prompt_token_ids(i) < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt_token_ids[", i, "] must be >= 0, got ", in.prompt_token_ids(i)));
      }
    }
    out.prompt_token_ids.assign(in.prompt_token_ids().begin(), in.prompt_token_ids().end());
  }
  out.prompt = in.prompt();
  if (in.n() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("n must be >= 1 (0 = 1), got ", in.n()));
  }
  out.n = in.n() == 0 ? 1 : in.n();
  if (out.n > 1 && !in.session_id().empty()) {
    return absl::InvalidArgumentError("n: must be 1 with a session");
  }
  if (in.max_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens must be >= 1 (0 = default), got ", in.max_tokens()));
  }
  out.max_tokens = in.max_tokens() == 0 ? kDefaultMaxTokens : in.max_tokens();
  const abcd::v1::SamplingParams& s = in.sampling();
  if (s.has_temperature()) out.sampling.temperature = s.temperature();
  if (s.has_top_k()) out.sampling.top_k = s.top_k();
  if (s.has_top_p()) out.sampling.top_p = s.top_p();
  if (s.has_repetition_penalty()) out.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_seed()) out.sampling.seed = s.seed();
  if (s.has_min_p()) out.sampling.min_p = s.min_p();
  if (s.has_presence_penalty()) out.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out.sampling.frequency_penalty = s.frequency_penalty();
  // Map order is unspecified: sorted by id, so one request always samples the same way.
  out.sampling.logit_bias.assign(s.logit_bias().begin(), s.logit_bias().end());
  std::sort(out.sampling.logit_bias.begin(), out.sampling.logit_bias.end());
  out.stop.assign(in.stop().begin(), in.stop().end());
  if (in.has_speculative()) {
    const abcd::v1::SpeculativeDecoding& spec = in.speculative();
    if (spec.mode() != "ngram" && spec.mode() != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("speculative.mode must be \"ngram\" or \"off\", got \"",
                       spec.mode().substr(0, 64), "\""));
    }
    SpeculativeParams params;
    params.mode = spec.mode() == "ngram" ? SpeculativeMode::kNgram : SpeculativeMode::kOff;
    if (spec.has_k()) params.k = spec.k();
    if (absl::Status status = ValidateSpeculativeParams(params, "speculative"); !status.ok()) {
      return status;
    }
    out.speculative = params;
  }
  out.deadline = deadline;
  switch (in.response_format().type()) {
    case abcd::v1::ResponseFormat::TYPE_JSON_OBJECT:
      out.response_format = JsonGrammar::AnyObject();
      break;
    case abcd::v1::ResponseFormat::TYPE_JSON_SCHEMA: {
      const std::string& text = in.response_format().json_schema();
      if (absl::Status depth = CheckJsonNesting(text, "response_format.json_schema"); !depth.ok()) {
        return depth;
      }
      nlohmann::ordered_json schema = nlohmann::ordered_json::parse(
          text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded()) {
        return absl::InvalidArgumentError(
            "response_format.json_schema must be a JSON Schema (JSON text)");
      }
      absl::StatusOr<std::shared_ptr<const JsonGrammar>> grammar =
          JsonGrammar::FromSchema(schema, "response_format.json_schema");
      if (!grammar.ok()) return grammar.status();
      out.response_format = *std::move(grammar);
      break;
    }
    case abcd::v1::ResponseFormat::TYPE_TEXT:
      if (!in.response_format().json_schema().empty()) {
        return absl::InvalidArgumentError(
            "response_format.json_schema needs type TYPE_JSON_SCHEMA");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("response_format.type: unknown value ", in.response_format().type()));
  }
  return out;
}

absl::StatusOr<GenerationRequest> ToTranslationRequest(const abcd::v1::TranslateRequest& in,
                                                       absl::Time deadline) {
  if (in.beam_size() < 0) {
    return absl::InvalidArgumentError("beam_size must be >= 1 (0 = default)");
  }
  if (in.max_tokens() < 0) {
    return absl::InvalidArgumentError("max_tokens must be >= 1 (0 = default)");
  }
  GenerationRequest out;
  out.source = in.text();
  out.beam_size = in.beam_size() == 0 ? kDefaultBeamSize : in.beam_size();
  out.max_tokens = in.max_tokens() == 0 ? kDefaultTranslateMaxTokens : in.max_tokens();
  out.sampling.temperature = 0.0f;
  out.deadline = deadline;
  return out;
}

}  // namespace abcd
