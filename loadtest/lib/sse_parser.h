// Incremental parser for the server-sent events of POST /v1/completions with "stream": true:
// bytes arrive in arbitrary pieces; every complete event ("data: ...\n\n", possibly several data
// lines, CRLF or LF) is handed out as soon as its blank line arrives.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace abcd::loadtest {

class SseParser {
 public:
  // Appends `bytes` and returns the data of every event they completed, in order (multi-line
  // data joined with '\n'; events without data lines are dropped).
  std::vector<std::string> Feed(absl::string_view bytes);
  // Bytes of an unfinished event.
  size_t pending() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

// One parsed /v1/completions stream chunk.
struct CompletionChunk {
  bool done = false;   // the "[DONE]" sentinel
  bool error = false;  // an {"error": {...}} event
  std::string error_type;
  std::string error_message;
  std::string text;           // choices[0].text
  bool has_usage = false;     // the usage chunk ("choices": [], stream_options.include_usage)
  int prompt_tokens = 0;      // usage.prompt_tokens
  int completion_tokens = 0;  // usage.completion_tokens
  bool malformed = false;     // not JSON, or not the expected shape
  std::string session_id;     // "session_id", when the request used a session
};

CompletionChunk ParseCompletionChunk(absl::string_view data);

}  // namespace abcd::loadtest
