// ImportSessionChunks (proto/abcd/v1/generator.proto): a session blob larger than one gRPC
// message, in chunks. The first chunk's total_bytes is checked against --max_session_bytes and
// charged to the body budget before any data is kept, so memory never grows past what was
// admitted; the chunks' data must add up to exactly total_bytes (INVALID_ARGUMENT naming
// total_bytes otherwise). The blob is then imported through SessionOps on the gRPC callback
// thread, like ImportSession, and the charge released.
//
// Thread-safety: one reactor per call, driven by gRPC's callbacks (never concurrently).
#pragma once

#include <functional>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/status/status.h"
#include "server/core/body_budget.h"
#include "server/core/session_ops.h"

namespace abcd {

// `count` is called once with the call's outcome (CANCELLED when the client cancelled).
// `sessions` null: UNAVAILABLE. `budget` null: no budget.
grpc::ServerReadReactor<abcd::v1::SessionChunk>* StartChunkedImport(
    grpc::CallbackServerContext* context, abcd::v1::SessionInfo* response,
    const SessionOps* sessions, BodyBudget* budget, std::function<void(const absl::Status&)> count);

}  // namespace abcd
