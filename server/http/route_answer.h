// A route's answer before it is sent: the response and the abcd_requests_total status label it
// is counted with (empty: not counted, e.g. a 404 for a path that is no route). StatusAnswer is
// how every route turns an absl::Status into its HTTP error (http_errors.h: status code,
// OpenAI-style body, Retry-After on 429/503), so HttpService and the route files agree.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/http/http_errors.h"
#include "server/http/http_server.h"

namespace abcd::http {

struct RouteAnswer {
  ServerResponse response;
  std::string label;
};

// At most this much of a client's path (or method) is echoed in an error message.
inline constexpr size_t kMaxEchoedPath = 256;
inline absl::string_view Truncated(absl::string_view text) {
  return text.substr(0, kMaxEchoedPath);
}

// Model output may hold invalid UTF-8: replaced instead of throwing.
inline std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline ServerResponse JsonResponse(int status, std::string body) {
  ServerResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

// 200 with `body`, counted "ok".
inline RouteAnswer JsonAnswer(const nlohmann::json& body) {
  return {JsonResponse(200, DumpJson(body)), "ok"};
}

// `status` (not OK) as its HTTP error, counted with its label.
inline RouteAnswer StatusAnswer(const absl::Status& status) {
  const ErrorMapping mapping = MapStatusCode(status.code());
  RouteAnswer answer{JsonResponse(mapping.http_status, ErrorBody(status)),
                     std::string(mapping.label)};
  if (status.code() == absl::StatusCode::kResourceExhausted ||
      status.code() == absl::StatusCode::kUnavailable) {
    answer.response.headers.emplace_back("Retry-After", "1");
  }
  return answer;
}

}  // namespace abcd::http
