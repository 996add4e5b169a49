// Drives abcd.v1.Generator with gRPC's callback client API: one ClientReadReactor per Generate
// stream (a unary callback per Translate), so a single process keeps hundreds of streams open
// without a thread each. Chunk timestamps are taken in OnReadDone, on gRPC's event thread, the
// moment each message is delivered. Calls are spread round-robin over `channels` channels, each
// its own HTTP/2 connection.
#pragma once

#include <memory>
#include <string>

#include "loadtest/lib/driver.h"

namespace abcd::loadtest {

// `target` is "ADDRESS:PORT" with a loopback address (see host_check.h).
std::unique_ptr<Driver> MakeGrpcDriver(const std::string& target, Endpoint endpoint, int channels);

}  // namespace abcd::loadtest
