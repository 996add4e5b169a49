// The /v1/sessions routes (server/README.md, "Sessions on the wire"), over SessionOps:
//
//   POST   /v1/sessions             body: an exported blob -> a new session's object
//   GET    /v1/sessions/{id}        -> {"session_id", "object": "session", "model", "tokens",
//                                       "bytes", "last_used"}
//   DELETE /v1/sessions/{id}        -> {"session_id", "object": "session", "deleted": true}
//   GET    /v1/sessions/{id}/state  -> the blob (application/octet-stream)
//
// An id that is empty or holds '/' is a 404 (not counted); another method is 405 with Allow
// (counted invalid_argument); `sessions` null is 503 "sessions are not enabled on this
// server"; the store's errors map as every route's (route_answer.h). Counted as kind
// "sessions".
//
// Thread-safety: the store is called on the calling (I/O) thread; SessionOps is thread-safe.
#pragma once

#include "server/core/session_ops.h"
#include "server/http/http_server.h"
#include "server/http/route_answer.h"

namespace abcd::http {

// Consumes request.body (an imported blob).
RouteAnswer AnswerSessions(const SessionOps* sessions, ServerRequest& request);

}  // namespace abcd::http
