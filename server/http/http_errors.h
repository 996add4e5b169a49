// How abcd's absl::Status codes appear on the HTTP/JSON wire (server/README.md): the HTTP
// status, the OpenAI-style error `type`, and the low-cardinality status label used by
// abcd_requests_total. Every mapping lives in MapStatusCode so the frontends cannot drift.
//
// Error bodies look like {"error": {"message": ..., "type": ..., "param": ..., "code": null}};
// `param` is the path to the offending request field the message starts with (all of abcd's
// validation messages do, e.g. "max_tokens must be ...", "messages[3].role must be ..."), or the
// one set by WithParam, else null. `code` is the status's
// kErrorCodePayload (served_models.h) when it has one: an unknown model is OpenAI's 404
// {"type": "invalid_request_error", "param": "model", "code": "model_not_found"}.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace abcd::http {

struct ErrorMapping {
  int http_status;          // 200 for OK
  absl::string_view type;   // e.g. "invalid_request_error"; empty for OK
  absl::string_view label;  // "ok", "invalid_argument", "resource_exhausted", ...
};

// INVALID_ARGUMENT/OUT_OF_RANGE -> 400, NOT_FOUND -> 404, ABORTED (a busy session) -> 409,
// FAILED_PRECONDITION (a session blob of another model) -> 412 (server/README.md),
// RESOURCE_EXHAUSTED -> 429, UNAVAILABLE/CANCELLED -> 503, DEADLINE_EXCEEDED -> 504,
// anything else -> 500.
ErrorMapping MapStatusCode(absl::StatusCode code);

// The request field a validation message names, as OpenAI's error.param: the path the message
// starts with when its first word is a known request field ("sampling.top_p must be ..." ->
// "top_p", "texts[2] must be ..." -> "texts[2]", "messages[3].role must ..." ->
// "messages[3].role", "response_format.json_schema.schema.properties.x.type: ..." -> that path,
// "n: must be 1 ..." -> "n"), else empty.
std::string ParamFromMessage(absl::string_view message);

// Where a message names no field (e.g. "session 0a1b... not found"), the field to report as
// error.param; carried as a payload, so it survives to the error body. A status whose message
// already names a field is returned as it is.
inline constexpr absl::string_view kParamPayload = "type.abcd.dev/error_param";
absl::Status WithParam(absl::Status status, absl::string_view param);

// Rewrites the engine's field names to the JSON request's ("sampling.top_p" -> "top_p").
std::string WireMessage(absl::string_view message);

// `status` with the field its message starts with renamed: when the message begins with `from`
// followed by ' ', '[', ':' or '.', that word becomes `to` (same code and payloads); any other
// status is returned as it is. For messages naming the engine's field where the HTTP request
// has another: a completion's token-id "prompt" is the engine's "prompt_token_ids", a chat's
// rendered conversation is "messages".
absl::Status RenameField(const absl::Status& status, absl::string_view from, absl::string_view to);

// The JSON error body for `status` (not OK), with `message` run through WireMessage.
std::string ErrorBody(const absl::Status& status);
// An error body with an explicit type, param and code (empty param or code -> null).
std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view param,
                      absl::string_view code = "");

}  // namespace abcd::http
