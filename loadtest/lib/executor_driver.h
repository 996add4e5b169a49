// The in-process baseline: requests go straight to an Executor (no sockets, no protobuf, no
// JSON). Timestamps are taken in the executor's event callback on the engine thread. Running the
// same workload through this driver and through the gRPC/HTTP drivers measures what serving
// adds on top of the engine.
#pragma once

#include <memory>

#include "engine/scheduler/executor.h"
#include "loadtest/lib/driver.h"

namespace abcd::loadtest {

// `executor` must outlive the driver.
std::unique_ptr<Driver> MakeExecutorDriver(Executor& executor);

}  // namespace abcd::loadtest
