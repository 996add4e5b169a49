#include "server/grpc/request_reader.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/core/utf8.h"

namespace abcd {
namespace {

using google::protobuf::internal::WireFormatLite;

absl::Status NotAMessage(const google::protobuf::Message& out) {
  return absl::InvalidArgumentError(
      absl::StrCat("request is not a valid ", out.GetDescriptor()->full_name()));
}

}  // namespace

absl::Status ReadRequest(const grpc::ByteBuffer& raw, std::span<const StringField> fields,
                         const FieldSizeCheck& size_check, google::protobuf::Message* out) {
  {
    grpc::ByteBuffer scan_buffer(raw);  // shares the slices
    grpc::ProtoBufferReader reader(&scan_buffer);
    google::protobuf::io::CodedInputStream in(&reader);
    std::vector<int> seen(fields.size(), 0);
    while (const uint32_t tag = in.ReadTag()) {
      const int number = WireFormatLite::GetTagFieldNumber(tag);
      const StringField* field = nullptr;
      size_t index = 0;
      for (; index < fields.size(); ++index) {
        if (fields[index].number == number) {
          field = &fields[index];
          break;
        }
      }
      if (field == nullptr ||
          WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
        if (!WireFormatLite::SkipField(&in, tag)) return NotAMessage(*out);
        continue;
      }
      const std::string name = field->repeated ? absl::StrCat(field->name, "[", seen[index], "]")
                                               : std::string(field->name);
      ++seen[index];
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return NotAMessage(*out);
      if (size_check) {
        if (absl::Status status = size_check(name, length); !status.ok()) return status;
      }
      std::string value;
      if (!in.ReadString(&value, static_cast<int>(length))) return NotAMessage(*out);
      if (!IsValidUtf8(value)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " is not valid UTF-8"));
      }
    }
    if (!in.ConsumedEntireMessage()) return NotAMessage(*out);
  }
  grpc::ByteBuffer parse_buffer(raw);
  grpc::ProtoBufferReader reader(&parse_buffer);
  if (!out->ParseFromZeroCopyStream(&reader)) return NotAMessage(*out);
  return absl::OkStatus();
}

}  // namespace abcd
