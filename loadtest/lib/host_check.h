// abcd-loadtest only ever talks to this machine: a load generator pointed at someone else's
// server is an attack. Targets must be loopback literals (127.0.0.0/8, ::1, or an IPv4-mapped
// ::ffff:127.x.y.z) or the name "localhost", which is pinned to 127.0.0.1 without asking DNS.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace abcd::loadtest {

// The address to connect to for `host` (brackets around IPv6 removed, "localhost" ->
// "127.0.0.1"), or INVALID_ARGUMENT naming the host when it is not loopback.
absl::StatusOr<std::string> LoopbackAddress(const std::string& host);

}  // namespace abcd::loadtest
