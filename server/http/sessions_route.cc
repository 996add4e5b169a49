#include "server/http/sessions_route.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace abcd::http {
namespace {

using nlohmann::json;

json SessionObject(const SessionMetadata& metadata) {
  return {{"session_id", metadata.session_id},
          {"object", "session"},
          {"model", metadata.model},
          {"tokens", metadata.tokens},
          {"bytes", metadata.bytes},
          {"last_used",
           absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", metadata.last_used, absl::UTCTimeZone())}};
}

}  // namespace

RouteAnswer AnswerSessions(const SessionOps* sessions, ServerRequest& request) {
  const std::string& path = request.path;
  std::string id;
  bool state = false;
  std::string allowed;
  if (path == "/v1/sessions") {
    allowed = "POST";
  } else {
    id = path.substr(std::string("/v1/sessions/").size());
    if (absl::EndsWith(id, "/state")) {
      id.resize(id.size() - 6);
      state = true;
      allowed = "GET";
    } else {
      allowed = "GET, DELETE";
    }
    if (id.empty() || id.find('/') != std::string::npos) {
      return {JsonResponse(404, ErrorBody(absl::StrCat("no route for ", Truncated(request.method),
                                                       " ", Truncated(path)),
                                          "not_found_error", "")),
              ""};
    }
  }
  const bool method_ok =
      (allowed == "POST" && request.method == "POST") ||
      (allowed == "GET" && request.method == "GET") ||
      (allowed == "GET, DELETE" && (request.method == "GET" || request.method == "DELETE"));
  if (!method_ok) {
    ServerResponse response =
        JsonResponse(405, ErrorBody(absl::StrCat(Truncated(request.method), " is not allowed on ",
                                                 Truncated(path), "; use ", allowed),
                                    "invalid_request_error", ""));
    response.headers.emplace_back("Allow", allowed);
    return {std::move(response), "invalid_argument"};
  }
  if (sessions == nullptr) {
    return StatusAnswer(absl::UnavailableError("sessions are not enabled on this server"));
  }
  if (path == "/v1/sessions") {
    absl::StatusOr<SessionMetadata> imported = sessions->Import(std::move(request.body));
    if (!imported.ok()) return StatusAnswer(imported.status());
    return JsonAnswer(SessionObject(*imported));
  }
  if (state) {
    absl::StatusOr<std::string> blob = sessions->Export(id);
    if (!blob.ok()) return StatusAnswer(blob.status());
    ServerResponse response;
    response.content_type = "application/octet-stream";
    response.body = *std::move(blob);
    return {std::move(response), "ok"};
  }
  if (request.method == "DELETE") {
    if (absl::Status status = sessions->Delete(id); !status.ok()) return StatusAnswer(status);
    return JsonAnswer({{"session_id", id}, {"object", "session"}, {"deleted", true}});
  }
  absl::StatusOr<SessionMetadata> metadata = sessions->Get(id);
  if (!metadata.ok()) return StatusAnswer(metadata.status());
  return JsonAnswer(SessionObject(*metadata));
}

}  // namespace abcd::http
