#include "server/http/json_error.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace abcd::http {
namespace {

using nlohmann::json;

// Follows the path to the value being parsed; records the parse error.
class PathTracker {
 public:
  bool null() { return Value(); }
  bool boolean(bool) { return Value(); }
  bool number_integer(json::number_integer_t) { return Value(); }
  bool number_unsigned(json::number_unsigned_t) { return Value(); }
  bool number_float(json::number_float_t, const std::string&) { return Value(); }
  bool string(std::string&) { return Value(); }
  bool binary(json::binary_t&) { return Value(); }
  bool start_object(std::size_t) {
    frames_.push_back({true, "", -1});
    return true;
  }
  bool key(std::string& name) {
    frames_.back().key = name;
    return true;
  }
  bool end_object() { return End(); }
  bool start_array(std::size_t) {
    frames_.push_back({false, "", -1});
    return true;
  }
  bool end_array() { return End(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) {
    position_ = position;
    token_ = last_token;
    overflow_ = error.id == 406;  // out_of_range.406: number overflow
    return false;
  }

  // The field being parsed when the error came.
  std::string Path() const {
    std::string path;
    for (const Frame& frame : frames_) {
      if (frame.object) {
        absl::StrAppend(&path, path.empty() ? "" : ".", frame.key.substr(0, 64));
      } else {
        absl::StrAppend(&path, "[", frame.index + 1, "]");
      }
    }
    return path.empty() ? "request body" : path;
  }
  bool overflow() const { return overflow_; }
  std::size_t position() const { return position_; }
  const std::string& token() const { return token_; }

 private:
  struct Frame {
    bool object;
    std::string key;
    int64_t index;  // arrays: the element before the one being parsed
  };
  bool Value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    return true;
  }
  bool End() {
    frames_.pop_back();
    return Value();
  }

  std::vector<Frame> frames_;
  std::size_t position_ = 0;
  std::string token_;
  bool overflow_ = false;
};

}  // namespace

absl::Status InvalidJsonError(absl::string_view body) {
  PathTracker tracker;
  json::sax_parse(body.begin(), body.end(), &tracker);
  if (tracker.overflow()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tracker.Path(), " must be a number within the range of a double, got ",
                     tracker.token().substr(0, 64)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("request body is not valid JSON (at byte ", tracker.position(), ")"));
}

}  // namespace abcd::http
