#include "engine/core/json_nesting.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace abcd {
namespace {

// Path components shown in the error: enough to find the field, not the whole 50,000 levels.
constexpr size_t kPathFrames = 8;
constexpr size_t kKeyBytes = 48;

struct Frame {
  bool object = false;
  bool expecting_key = false;  // objects: the next string is a key
  std::string key;             // objects: the key being read (truncated)
  int64_t index = 0;           // arrays: the element being read
};

std::string DescribePath(absl::string_view what, const std::vector<Frame>& frames) {
  std::string path;
  size_t shown = 0;
  for (const Frame& frame : frames) {
    if (shown++ == kPathFrames) {
      absl::StrAppend(&path, "...");
      break;
    }
    if (frame.object) {
      if (frame.expecting_key) {  // the object itself is the deep value (no key read yet)
        break;
      }
      absl::StrAppend(&path, path.empty() ? "" : ".", frame.key);
    } else {
      absl::StrAppend(&path, "[", frame.index, "]");
    }
  }
  if (what.empty()) return path.empty() || path.front() == '[' ? "request body" + path : path;
  if (path.empty()) return std::string(what);
  return absl::StrCat(what, ": ", path);
}

}  // namespace

absl::Status CheckJsonNesting(absl::string_view text, absl::string_view what, int max_depth) {
  std::vector<Frame> frames;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    switch (c) {
      case '"': {
        // Skip the string; keep it when it is an object key.
        const size_t begin = i + 1;
        size_t j = begin;
        while (j < n && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
        if (!frames.empty() && frames.back().object && frames.back().expecting_key) {
          frames.back().key = std::string(text.substr(begin, std::min(j, n) - begin));
          if (frames.back().key.size() > kKeyBytes) frames.back().key.resize(kKeyBytes);
          frames.back().expecting_key = false;
        }
        i = j;
        break;
      }
      case '[':
      case '{':
        if (static_cast<int>(frames.size()) >= max_depth) {
          return absl::InvalidArgumentError(absl::StrCat(
              DescribePath(what, frames), " nests JSON deeper than ", max_depth, " levels"));
        }
        frames.push_back(Frame{c == '{', c == '{', "", 0});
        break;
      case ']':
      case '}':
        if (!frames.empty()) frames.pop_back();
        break;
      case ',':
        if (!frames.empty()) {
          if (frames.back().object) {
            frames.back().expecting_key = true;
          } else {
            ++frames.back().index;
          }
        }
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace abcd
