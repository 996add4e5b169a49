// Drives abcd-server's HTTP/JSON frontend: POST /v1/completions with "stream": true (each
// server-sent event is timestamped as the receive callback sees it) or POST /v1/translate.
// cpp-httplib's client is blocking, so requests run on a pool of worker threads, each with its
// own keep-alive connection; the pool grows on demand up to `max_threads` (a request waits for a
// free worker beyond that, which shows up as client queue time). A request that fails on a
// reused connection the server had closed, before any of its answer arrived, is sent again
// once on a new connection, so servers that close after each response cost no errors.
#pragma once

#include <memory>
#include <string>

#include "loadtest/lib/driver.h"

namespace abcd::loadtest {

// `address` must be loopback (see host_check.h).
std::unique_ptr<Driver> MakeHttpDriver(const std::string& address, int port, Endpoint endpoint,
                                       int max_threads);

}  // namespace abcd::loadtest
