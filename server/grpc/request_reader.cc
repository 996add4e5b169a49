#include "server/grpc/request_reader.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/core/utf8.h"

namespace abcd {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

constexpr int kMaxDepth = 16;

absl::Status NotAMessage(const google::protobuf::Message& out) {
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", out.GetDescriptor()->full_name()));
}

// Scans one message's fields until its end (or the stream's limit). `prefix` names the
// enclosing field ("sampling.").
absl::Status Scan(CodedInputStream& in, const Descriptor& descriptor, const std::string& prefix,
                  int depth, const FieldSizeCheck& size_check, const FieldCountCheck& count_check,
                  const google::protobuf::Message& out) {
  std::map<int, int> seen;        // per repeated field: elements so far
  std::map<int, int64_t> counts;  // per repeated numeric field: elements so far
  while (const uint32_t tag = in.ReadTag()) {
    const FieldDescriptor* field =
        descriptor.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    const bool is_string =
        field != nullptr && delimited && field->type() == FieldDescriptor::TYPE_STRING;
    const bool is_message = field != nullptr && delimited &&
                            field->type() == FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth;
    // Varint-encoded repeated numbers (int32, int64, enums, ...), packed or not.
    const bool is_repeated_number = field != nullptr && field->is_repeated() &&
                                    WireFormatLite::WireTypeForFieldType(
                                        static_cast<WireFormatLite::FieldType>(field->type())) ==
                                        WireFormatLite::WIRETYPE_VARINT;
    if (is_repeated_number && count_check) {
      int64_t& count = counts[field->number()];
      if (delimited) {  // packed: count the varints inside without keeping them
        uint32_t length = 0;
        if (!in.ReadVarint32(&length)) return NotAMessage(out);
        const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
        uint64_t ignored = 0;
        while (in.BytesUntilLimit() > 0) {
          if (!in.ReadVarint64(&ignored)) return NotAMessage(out);
          ++count;
          if ((count & 255) == 0) {
            if (absl::Status s = count_check(prefix + field->name(), count); !s.ok()) return s;
          }
        }
        in.PopLimit(limit);
      } else {
        if (!WireFormatLite::SkipField(&in, tag)) return NotAMessage(out);
        ++count;
      }
      if (absl::Status s = count_check(prefix + field->name(), count); !s.ok()) return s;
      continue;
    }
    if (!is_string && !is_message) {
      if (!WireFormatLite::SkipField(&in, tag)) return NotAMessage(out);
      continue;
    }
    if (is_message && field->is_repeated() && count_check) {
      // Counted before the element is read, so a request with too many is refused before any
      // per-element structure is built.
      const int64_t count = ++counts[field->number()];
      if (absl::Status s = count_check(prefix + field->name(), count); !s.ok()) return s;
    }
    std::string name = absl::StrCat(prefix, field->name());
    if (field->is_repeated()) absl::StrAppend(&name, "[", seen[field->number()]++, "]");
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return NotAMessage(out);
    if (is_string) {
      if (size_check) {
        if (absl::Status status = size_check(name, length); !status.ok()) return status;
      }
      std::string value;
      if (!in.ReadString(&value, static_cast<int>(length))) return NotAMessage(out);
      if (!IsValidUtf8(value)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " is not valid UTF-8"));
      }
      continue;
    }
    const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
    if (absl::Status status =
            Scan(in, *field->message_type(), name + ".", depth + 1, size_check, count_check, out);
        !status.ok()) {
      return status;
    }
    if (in.BytesUntilLimit() != 0) return NotAMessage(out);
    in.PopLimit(limit);
  }
  if (!in.ConsumedEntireMessage()) return NotAMessage(out);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadRequest(const grpc::ByteBuffer& raw, const FieldSizeCheck& size_check,
                         google::protobuf::Message* out, const FieldCountCheck& count_check) {
  {
    grpc::ByteBuffer scan_buffer(raw);  // shares the slices
    grpc::ProtoBufferReader reader(&scan_buffer);
    CodedInputStream in(&reader);
    if (absl::Status status = Scan(in, *out->GetDescriptor(), "", 0, size_check, count_check, *out);
        !status.ok()) {
      return status;
    }
  }
  grpc::ByteBuffer parse_buffer(raw);
  grpc::ProtoBufferReader reader(&parse_buffer);
  if (!out->ParseFromZeroCopyStream(&reader)) return NotAMessage(*out);
  return absl::OkStatus();
}

}  // namespace abcd
