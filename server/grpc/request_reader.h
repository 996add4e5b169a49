// Reads a request message from its raw gRPC bytes, checking its string fields first.
//
// proto3 `string` fields must be UTF-8, and protobuf's own parser fails a whole message that
// breaks this: through a typed gRPC method the client then gets UNIMPLEMENTED without a word and
// the server logs an unstructured libprotobuf line. So the Generator service takes Generate and
// Translate as raw bytes (the generated WithRawCallbackMethod_*; the wire contract is unchanged)
// and this reader scans the wire format first, guided by the message's descriptor (so a field
// added to the proto later is covered too): a string field that is not UTF-8 is
// INVALID_ARGUMENT naming it ("prompt", "stop[1]", "sampling.x"), and a string over its size
// limit is refused by its length prefix before its bytes are read (refusal before work). A
// repeated numeric field (prompt_token_ids) is counted while scanning, packed or not, and
// refused by `count_check` once it has too many elements, before any of them is copied; so is
// a repeated message field (messages), each element counted before it is scanned. Only then
// is the message parsed.
//
// Thread-safe: pure functions.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace abcd {

// INVALID_ARGUMENT for a string field (named as errors name it) the limit refuses, from its
// byte length alone.
using FieldSizeCheck = std::function<absl::Status(absl::string_view name, size_t bytes)>;
// INVALID_ARGUMENT for a repeated numeric or message field (named without an index, nested
// ones with their prefix: "sampling.x") that has `count` elements so far; called as the count
// grows (for packed numbers at least every 256 elements and at the end).
using FieldCountCheck = std::function<absl::Status(absl::string_view name, int64_t count)>;

// Checks every string field of the message in `raw`, nested messages included (UTF-8, and
// `size_check` when set), then parses `raw` into `out`. INVALID_ARGUMENT naming the field, or
// "request is not a valid <type>" when the bytes are not a message of out's type.
absl::Status ReadRequest(const grpc::ByteBuffer& raw, const FieldSizeCheck& size_check,
                         google::protobuf::Message* out, const FieldCountCheck& count_check = {});

}  // namespace abcd
