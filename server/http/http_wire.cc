#include "server/http/http_wire.h"

#include <algorithm>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/status.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace abcd::http::wire {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

absl::string_view Reason(int status) {
  const beast::string_view reason = bhttp::obsolete_reason(bhttp::int_to_status(status));
  return absl::string_view(reason.data(), reason.size());
}

}  // namespace

std::string Head(const ServerResponse& r, bool http10, bool close, Framing framing) {
  std::string head = absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status), "\r\n");
  if (!r.content_type.empty()) absl::StrAppend(&head, "Content-Type: ", r.content_type, "\r\n");
  for (const auto& [name, value] : r.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (framing == Framing::kChunked) {
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
  } else if (framing == Framing::kLength) {
    absl::StrAppend(&head, "Content-Length: ", r.body.size(), "\r\n");
  }
  if (close) {
    absl::StrAppend(&head, "Connection: close\r\n");
  } else if (http10) {
    absl::StrAppend(&head, "Connection: keep-alive\r\n");
  }
  absl::StrAppend(&head, "\r\n");
  return head;
}

// The error a parse failure deserves.
std::pair<int, std::string> ParseError(const beast::error_code& ec, const ServerLimits& limits) {
  if (ec == bhttp::error::header_limit) {
    return {431, absl::StrCat("request header exceeds ", limits.max_header_bytes, " bytes")};
  }
  if (ec == bhttp::error::body_limit) {
    return {413, absl::StrCat("request body exceeds the limit of ",
                              std::max(limits.max_body_bytes, limits.large_body_bytes), " bytes")};
  }
  if (ec == bhttp::error::bad_content_length) {
    return {400, "malformed HTTP request: bad Content-Length"};
  }
  return {400, absl::StrCat("malformed HTTP request: ", ec.message())};
}

}  // namespace abcd::http::wire
