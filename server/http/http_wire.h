// Internal to HttpServer (http_server.cc): the bytes of a response head and the error a Beast
// parse failure deserves. Pure functions.
#pragma once

#include <boost/beast/core/error.hpp>
#include <string>
#include <utility>

#include "server/http/http_server.h"

namespace abcd::http::wire {

// How a response's body ends.
enum class Framing { kLength, kChunked, kClose };

// The status line and headers of `r` (with Content-Length, chunked or neither as `framing`
// says, and Connection: close / keep-alive for HTTP/1.0), ending with the blank line.
std::string Head(const ServerResponse& r, bool http10, bool close, Framing framing);

// The status and message a parse failure deserves (431, 413 or 400).
std::pair<int, std::string> ParseError(const boost::beast::error_code& ec,
                                       const ServerLimits& limits);

}  // namespace abcd::http::wire
