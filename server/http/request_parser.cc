#include "server/http/request_parser.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/core/json_nesting.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"
#include "nlohmann/json.hpp"
#include "server/http/http_errors.h"
#include "server/http/json_error.h"

namespace abcd::http {
namespace {

using nlohmann::json;

constexpr size_t kDescribedStringBytes = 40;

// A short rendering of a client's value for error messages. Arrays and objects are named, not
// dumped: a deeply nested value would make dump() recurse deeply.
std::string Describe(const json& value) {
  switch (value.type()) {
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::string: {
      const std::string& s = value.get_ref<const std::string&>();
      if (s.size() <= kDescribedStringBytes) {
        return value.dump(-1, ' ', false, json::error_handler_t::replace);
      }
      return absl::StrCat(json(s.substr(0, kDescribedStringBytes))
                              .dump(-1, ' ', false, json::error_handler_t::replace),
                          "...");
    }
    default:
      return value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

absl::Status FieldError(absl::string_view field, absl::string_view expectation, const json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be ", expectation, ", got ", Describe(value)));
}

// The field's value, or null when absent; JSON null counts as absent.
const json* Field(const json& object, absl::string_view name) {
  auto it = object.find(std::string(name));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<json> ParseObject(absl::string_view body) {
  if (absl::Status depth = CheckJsonNesting(body, ""); !depth.ok()) return depth;
  json parsed = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidJsonError(body);
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body must be a JSON object, got ", Describe(parsed)));
  }
  return parsed;
}

// An integer in [lo, hi]; absent keeps *out.
absl::Status ReadInt(const json& object, absl::string_view name, int64_t lo, int64_t hi,
                     int64_t* out) {
  const json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  const std::string expectation = absl::StrCat("an integer in [", lo, ", ", hi, "]");
  if (!value->is_number_integer()) return FieldError(name, expectation, *value);
  if (value->is_number_unsigned()) {
    const uint64_t v = value->get<uint64_t>();
    if (v > static_cast<uint64_t>(hi) || static_cast<int64_t>(v) < lo) {
      return FieldError(name, expectation, *value);
    }
    *out = static_cast<int64_t>(v);
  } else {
    const int64_t v = value->get<int64_t>();
    if (v < lo || v > hi) return FieldError(name, expectation, *value);
    *out = v;
  }
  return absl::OkStatus();
}

absl::Status ReadInt(const json& object, absl::string_view name, int lo, int hi, int* out) {
  int64_t v = *out;
  if (absl::Status s = ReadInt(object, name, int64_t{lo}, int64_t{hi}, &v); !s.ok()) return s;
  *out = static_cast<int>(v);
  return absl::OkStatus();
}

// Any JSON number; the range is left to ValidateSamplingParams. Values beyond float's range
// become +-inf (which validation rejects) rather than an undefined conversion.
absl::Status ReadFloat(const json& object, absl::string_view name, float* out) {
  const json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_number()) return FieldError(name, "a number", *value);
  const double v = value->get<double>();
  if (std::isnan(v)) return FieldError(name, "a number", *value);
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
    *out = v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  } else {
    *out = static_cast<float>(v);
  }
  return absl::OkStatus();
}

absl::Status ReadBool(const json& object, absl::string_view name, bool* out) {
  const json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_boolean()) return FieldError(name, "a boolean", *value);
  *out = value->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadModel(const json& object, std::string* out) {
  const json* value = Field(object, "model");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_string()) return FieldError("model", "a string", *value);
  *out = value->get<std::string>();
  return absl::OkStatus();
}

// OpenAI's best_of: accepted only as 1.
absl::Status RequireOne(const json& object, absl::string_view name) {
  const json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_number_integer() || value->get<int64_t>() != 1) {
    return FieldError(name, "1 (one choice per request)", *value);
  }
  return absl::OkStatus();
}

// An array of token ids (integers in [0, 2^31)) of at most `limit`.
absl::Status ReadTokenIds(const json& value, absl::string_view field, int limit,
                          std::vector<int32_t>* ids) {
  if (!value.is_array()) return FieldError(field, "an array of token ids", value);
  if (value.size() > static_cast<size_t>(limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", value.size(), " token ids, more than the limit of ", limit));
  }
  ids->reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    if (!item.is_number_integer() || (!item.is_number_unsigned() && item.get<int64_t>() < 0) ||
        item.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return FieldError(absl::StrCat(field, "[", i, "]"), "a token id (an integer >= 0)", item);
    }
    ids->push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return absl::OkStatus();
}

// "prompt": a non-empty string, an array of exactly one such string, or a non-empty array of
// token ids (integers in [0, 2^31)) of at most max_prompt_tokens; token ids go to `ids`.
absl::Status ReadPrompt(const json& object, int max_prompt_tokens, std::string* out,
                        std::vector<int32_t>* ids) {
  const json* value = Field(object, "prompt");
  if (value == nullptr) return absl::InvalidArgumentError("prompt is required");
  const json* text = value;
  if (value->is_array() && !value->empty() && (*value)[0].is_number()) {
    return ReadTokenIds(*value, "prompt", max_prompt_tokens, ids);
  }
  if (value->is_array()) {
    if (value->size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt must be a string, an array of exactly one string or an array of "
                       "token ids, got an array of ",
                       value->size(), " elements"));
    }
    text = &(*value)[0];
  }
  if (!text->is_string()) {
    return FieldError("prompt", "a non-empty string (or an array of one, or an array of token ids)",
                      *value);
  }
  if (text->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError("prompt must be a non-empty string, got \"\"");
  }
  *out = text->get<std::string>();
  return absl::OkStatus();
}

// "session_id": "new" or a session's id (its form is checked by the session manager).
absl::Status ReadSessionId(const json& object, std::string* out) {
  const json* value = Field(object, "session_id");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_string() || value->get_ref<const std::string&>().empty()) {
    return FieldError("session_id", "\"new\" or a session id", *value);
  }
  *out = value->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadStop(const json& object, int max_strings, std::vector<std::string>* out) {
  const json* value = Field(object, "stop");
  if (value == nullptr) return absl::OkStatus();
  const std::string expectation =
      absl::StrCat("a non-empty string or an array of at most ", max_strings, " of them");
  if (value->is_string()) {
    if (value->get_ref<const std::string&>().empty()) {
      return FieldError("stop", expectation, *value);
    }
    out->push_back(value->get<std::string>());
    return absl::OkStatus();
  }
  if (!value->is_array() || value->size() > static_cast<size_t>(max_strings)) {
    return FieldError("stop", expectation, *value);
  }
  for (size_t i = 0; i < value->size(); ++i) {
    const json& item = (*value)[i];
    if (!item.is_string() || item.get_ref<const std::string&>().empty()) {
      return FieldError(absl::StrCat("stop[", i, "]"), "a non-empty string", item);
    }
    out->push_back(item.get<std::string>());
  }
  return absl::OkStatus();
}

// OpenAI's logit_bias: {"<token id>": bias, ...}; the values' range is left to
// ValidateSamplingParams, the ids' upper bound to the Executor (it knows the vocabulary).
absl::Status ReadLogitBias(const json& object, SamplingParams* sampling) {
  const json* value = Field(object, "logit_bias");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_object()) {
    return FieldError("logit_bias", "an object of token ids to numbers", *value);
  }
  if (value->size() > kMaxLogitBias) {
    return absl::InvalidArgumentError(
        absl::StrCat("logit_bias has ", value->size(), " entries, at most ", kMaxLogitBias));
  }
  for (const auto& [key, bias] : value->items()) {
    int32_t id = -1;
    const bool digits =
        !key.empty() && key.size() <= 9 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || !absl::SimpleAtoi(key, &id)) {
      return FieldError("logit_bias", "keyed by token ids (\"50256\")", json(key));
    }
    if (!bias.is_number() || std::isnan(bias.get<double>())) {
      return FieldError(absl::StrCat("logit_bias[", key, "]"), "a number", bias);
    }
    const double clamped = std::clamp(bias.get<double>(), -1e9, 1e9);  // validation refuses it
    sampling->logit_bias.emplace_back(id, static_cast<float>(clamped));
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& object, SamplingParams* sampling) {
  if (absl::Status s = ReadFloat(object, "temperature", &sampling->temperature); !s.ok()) return s;
  for (const auto& [name, field] : {std::pair<absl::string_view, float*>{"min_p", &sampling->min_p},
                                    {"presence_penalty", &sampling->presence_penalty},
                                    {"frequency_penalty", &sampling->frequency_penalty}}) {
    if (absl::Status s = ReadFloat(object, name, field); !s.ok()) return s;
  }
  if (absl::Status s = ReadLogitBias(object, sampling); !s.ok()) return s;
  if (absl::Status s = ReadFloat(object, "top_p", &sampling->top_p); !s.ok()) return s;
  if (absl::Status s =
          ReadInt(object, "top_k", 0, std::numeric_limits<int>::max(), &sampling->top_k);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadFloat(object, "repetition_penalty", &sampling->repetition_penalty);
      !s.ok()) {
    return s;
  }
  if (const json* seed = Field(object, "seed"); seed != nullptr) {
    if (!seed->is_number_unsigned()) {
      return FieldError("seed", "a non-negative integer below 2^64", *seed);
    }
    sampling->seed = seed->get<uint64_t>();
  }
  // The engine's own check, so the door and the engine agree; its "sampling." prefix is
  // renamed to the JSON field names by WireMessage.
  if (absl::Status s = ValidateSamplingParams(*sampling); !s.ok()) {
    return absl::InvalidArgumentError(WireMessage(s.message()));
  }
  return absl::OkStatus();
}

// "speculative": {"mode": "ngram" | "off", "k": 1..kMaxSpeculativeTokens (default 4)}.
absl::Status ReadSpeculative(const json& object, std::optional<SpeculativeParams>* out) {
  const json* value = Field(object, "speculative");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_object()) {
    return FieldError("speculative", "an object ({\"mode\": \"ngram\", \"k\": 4})", *value);
  }
  SpeculativeParams params;
  const json* mode = Field(*value, "mode");
  if (mode == nullptr) return absl::InvalidArgumentError("speculative.mode is required");
  if (!mode->is_string() || (*mode != "ngram" && *mode != "off")) {
    return FieldError("speculative.mode", "\"ngram\" or \"off\"", *mode);
  }
  params.mode = *mode == "ngram" ? SpeculativeMode::kNgram : SpeculativeMode::kOff;
  if (absl::Status s = ReadInt(*value, "k", 1, kMaxSpeculativeTokens, &params.k); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("speculative.", s.message()));
  }
  *out = params;
  return absl::OkStatus();
}

}  // namespace

namespace {

// ParseResponseFormat; the schema is read from `ordered`, or (null) from `body` parsed again.
absl::StatusOr<std::shared_ptr<const JsonGrammar>> ResponseFormat(
    const json& object, absl::string_view body, const nlohmann::ordered_json* ordered) {
  const json* format = Field(object, "response_format");
  if (format == nullptr) return nullptr;
  constexpr absl::string_view kTypes = "one of \"text\", \"json_object\", \"json_schema\"";
  if (!format->is_object()) {
    return FieldError("response_format", "an object ({\"type\": \"json_object\"})", *format);
  }
  const json* type = Field(*format, "type");
  if (type == nullptr) return absl::InvalidArgumentError("response_format.type is required");
  if (!type->is_string()) return FieldError("response_format.type", kTypes, *type);
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "text") return nullptr;
  if (name == "json_object") return JsonGrammar::AnyObject();
  if (name != "json_schema") return FieldError("response_format.type", kTypes, *type);
  const json* spec = Field(*format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return absl::InvalidArgumentError(
        "response_format.json_schema must be an object with a schema for type json_schema");
  }
  for (const char* text_field : {"name", "description"}) {
    const json* value = Field(*spec, text_field);
    if (value != nullptr && !value->is_string()) {
      return FieldError(absl::StrCat("response_format.json_schema.", text_field), "a string",
                        *value);
    }
  }
  if (const json* strict = Field(*spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return FieldError("response_format.json_schema.strict", "a boolean", *strict);
  }
  if (Field(*spec, "schema") == nullptr) {
    return absl::InvalidArgumentError("response_format.json_schema.schema is required");
  }
  // In the body's key order: properties are generated in the order the schema lists them.
  nlohmann::ordered_json reparsed;
  if (ordered == nullptr) {
    if (absl::Status depth = CheckJsonNesting(body, ""); !depth.ok()) return depth;
    reparsed = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr,
                                             /*allow_exceptions=*/false);
    ordered = &reparsed;
  }
  const nlohmann::ordered_json* schema = ordered;
  for (const char* key : {"response_format", "json_schema", "schema"}) {
    const auto it = schema->is_object() ? schema->find(key) : schema->end();
    if (it == schema->end()) {
      return absl::InvalidArgumentError("response_format.json_schema.schema is required");
    }
    schema = &*it;
  }
  return JsonGrammar::FromSchema(*schema, "response_format.json_schema.schema");
}

// ParseCompletionRequest's fields of the parsed body `o` (`body`, `ordered`: ResponseFormat's).
absl::StatusOr<CompletionRequest> CompletionFields(const json& o, absl::string_view body,
                                                   const nlohmann::ordered_json* ordered,
                                                   const ParseLimits& limits) {
  CompletionRequest request;
  GenerationRequest& g = request.generation;
  // The default never exceeds the server's limit (found by http_completion_fuzzer).
  g.max_tokens = std::min(16, limits.max_tokens_limit);
  if (absl::Status s = ReadModel(o, &request.model); !s.ok()) return s;
  if (absl::Status s = ReadPrompt(o, limits.max_prompt_tokens, &g.prompt, &g.prompt_token_ids);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadInt(o, "logprobs", 0, kMaxTopLogprobs, &g.logprobs); !s.ok()) return s;
  if (absl::Status s = ReadBool(o, "echo", &request.echo); !s.ok()) return s;
  g.prompt_logprobs = request.echo && g.logprobs >= 0;
  // echo with logprobs and max_tokens 0 only scores the prompt (lm-eval-harness loglikelihood).
  if (absl::Status s = ReadInt(o, "max_tokens", g.prompt_logprobs ? 0 : 1, limits.max_tokens_limit,
                               &g.max_tokens);
      !s.ok()) {
    const json* value = Field(o, "max_tokens");
    if (g.prompt_logprobs || !value->is_number_integer() || value->get<int64_t>() != 0) return s;
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (0 only with echo and logprobs: the prompt is scored)"));
  }
  if (absl::Status s = ReadSampling(o, &g.sampling); !s.ok()) return s;
  if (absl::Status s = ReadStop(o, limits.max_stop_strings, &g.stop); !s.ok()) return s;
  if (absl::Status s = ReadBool(o, "stream", &request.stream); !s.ok()) return s;
  if (absl::Status s = ReadBool(o, "ignore_eos", &g.ignore_eos); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const JsonGrammar>> format = ResponseFormat(o, body, ordered);
  if (!format.ok()) return format.status();
  g.response_format = *std::move(format);
  if (absl::Status s = ReadInt(o, "n", 1, limits.max_choices, &g.n); !s.ok()) return s;
  if (absl::Status s = RequireOne(o, "best_of"); !s.ok()) return s;
  if (absl::Status s = ReadSessionId(o, &request.session_id); !s.ok()) return s;
  if (absl::Status s = ReadSpeculative(o, &g.speculative); !s.ok()) return s;
  if (!request.session_id.empty() && g.n > 1) {
    return absl::InvalidArgumentError("n: must be 1 with a session");
  }
  if (request.echo && g.n > 1) {
    return absl::InvalidArgumentError("echo: must be false with n > 1");
  }
  if (request.echo && !request.session_id.empty()) {
    return absl::InvalidArgumentError("echo: must be false with a session");
  }
  if (const json* options = Field(o, "stream_options"); options != nullptr) {
    if (!options->is_object()) {
      return FieldError("stream_options", "an object ({\"include_usage\": true})", *options);
    }
    if (!request.stream) {
      return absl::InvalidArgumentError("stream_options: only allowed when stream is true");
    }
    if (absl::Status s = ReadBool(*options, "include_usage", &request.include_usage); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("stream_options.", s.message()));
    }
  }
  return request;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonGrammar>> ParseResponseFormat(
    const json& object, const nlohmann::ordered_json& ordered) {
  return ResponseFormat(object, "", &ordered);
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ParseLimits& limits) {
  absl::StatusOr<json> object = ParseObject(body);
  if (!object.ok()) return object.status();
  return CompletionFields(*object, body, nullptr, limits);
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const json& object,
                                                         const nlohmann::ordered_json& ordered,
                                                         const ParseLimits& limits) {
  return CompletionFields(object, "", &ordered, limits);
}

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  absl::StatusOr<json> object = ParseObject(body);
  if (!object.ok()) return object.status();
  TokenizeRequest request;
  if (absl::Status s = ReadModel(*object, &request.model); !s.ok()) return s;
  const json* prompt = Field(*object, "prompt");
  if (prompt == nullptr) return absl::InvalidArgumentError("prompt is required");
  if (!prompt->is_string()) return FieldError("prompt", "a string", *prompt);
  request.prompt = prompt->get<std::string>();
  if (absl::Status s = ReadBool(*object, "add_special_tokens", &request.add_special_tokens);
      !s.ok()) {
    return s;
  }
  return request;
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body,
                                                         const ParseLimits& limits) {
  absl::StatusOr<json> object = ParseObject(body);
  if (!object.ok()) return object.status();
  DetokenizeRequest request;
  if (absl::Status s = ReadModel(*object, &request.model); !s.ok()) return s;
  const json* tokens = Field(*object, "tokens");
  if (tokens == nullptr) return absl::InvalidArgumentError("tokens is required");
  if (absl::Status s = ReadTokenIds(*tokens, "tokens", limits.max_prompt_tokens, &request.tokens);
      !s.ok()) {
    return s;
  }
  return request;
}

absl::StatusOr<TranslateRequest> ParseTranslateRequest(absl::string_view body,
                                                       const ParseLimits& limits) {
  absl::StatusOr<json> object = ParseObject(body);
  if (!object.ok()) return object.status();
  const json& o = *object;

  TranslateRequest request;
  if (absl::Status s = ReadModel(o, &request.model); !s.ok()) return s;
  const json* text = Field(o, "text");
  const json* texts = Field(o, "texts");
  if (text != nullptr && texts != nullptr) {
    return absl::InvalidArgumentError("text and texts are mutually exclusive; send one of them");
  }
  if (text == nullptr && texts == nullptr) {
    return absl::InvalidArgumentError("text is required (or texts, an array, for a batch)");
  }
  if (text != nullptr) {
    if (!text->is_string() || text->get_ref<const std::string&>().empty()) {
      return FieldError("text", "a non-empty string", *text);
    }
    request.texts.push_back(text->get<std::string>());
  } else {
    request.batch = true;
    if (!texts->is_array() || texts->empty() ||
        texts->size() > static_cast<size_t>(limits.max_batch_texts)) {
      std::string got = Describe(*texts);
      if (texts->is_array()) got = absl::StrCat("an array of ", texts->size());
      return absl::InvalidArgumentError(absl::StrCat("texts must be an array of 1 to ",
                                                     limits.max_batch_texts,
                                                     " non-empty strings, got ", got));
    }
    for (size_t i = 0; i < texts->size(); ++i) {
      const json& item = (*texts)[i];
      if (!item.is_string() || item.get_ref<const std::string&>().empty()) {
        return FieldError(absl::StrCat("texts[", i, "]"), "a non-empty string", item);
      }
      request.texts.push_back(item.get<std::string>());
    }
  }
  if (absl::Status s = ReadInt(o, "beam_size", 1, limits.max_beam_size, &request.beam_size);
      !s.ok()) {
    return s;
  }
  // The default (128) never exceeds the server's limit (found by http_translate_fuzzer).
  request.max_tokens = std::min(request.max_tokens, limits.max_tokens_limit);
  if (absl::Status s = ReadInt(o, "max_tokens", 1, limits.max_tokens_limit, &request.max_tokens);
      !s.ok()) {
    return s;
  }
  return request;
}

}  // namespace abcd::http
