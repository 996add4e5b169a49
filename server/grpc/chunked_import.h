// ImportSessionChunks (proto/abcd/v1/generator.proto): a session blob larger than one gRPC
// message, in chunks. The first chunk's total_bytes is checked against --max_session_bytes
// before any data is kept; the chunks' data must add up to exactly total_bytes
// (INVALID_ARGUMENT naming total_bytes otherwise). The blob is then imported through SessionOps
// on the gRPC callback thread, like ImportSession.
//
// Memory, like HTTP's bodies (http_server.h): the buffer grows with the data received (doubling,
// never past total_bytes), and each growth is charged to the body budget before it is made
// (RESOURCE_EXHAUSTED when it does not fit), so the budget holds what the call holds, not what
// it declared. The whole blob must arrive within `receive_timeout` of the call's start (HTTP: a
// body within 30 s of its header): a stalled upload then ends with DEADLINE_EXCEEDED and its
// buffer and charge are released at once.
//
// Thread-safety: one reactor per call, driven by gRPC's callbacks and its deadline alarm (a
// mutex orders the two).
#pragma once

#include <functional>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/core/body_budget.h"
#include "server/core/session_ops.h"

namespace abcd {

// `count` is called once with the call's outcome (CANCELLED when the client cancelled).
// `sessions` null: UNAVAILABLE. `budget` null: no budget.
grpc::ServerReadReactor<abcd::v1::SessionChunk>* StartChunkedImport(
    grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
    const SessionOps* sessions, BodyBudget* budget, absl::Duration receive_timeout,
    std::function<void(const absl::Status&)> count);

}  // namespace abcd
