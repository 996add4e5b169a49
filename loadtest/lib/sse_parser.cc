#include "loadtest/lib/sse_parser.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace abcd::loadtest {

std::vector<std::string> SseParser::Feed(absl::string_view bytes) {
  buffer_.append(bytes.data(), bytes.size());
  std::vector<std::string> events;
  for (;;) {
    // An event ends at the first blank line: "\n\n" or "\r\n\r\n".
    const size_t lf = buffer_.find("\n\n");
    const size_t crlf = buffer_.find("\r\n\r\n");
    size_t end = std::string::npos;
    size_t skip = 0;
    if (lf != std::string::npos && (crlf == std::string::npos || lf < crlf)) {
      end = lf;
      skip = 2;
    } else if (crlf != std::string::npos) {
      end = crlf;
      skip = 4;
    }
    if (end == std::string::npos) break;
    std::string data;
    bool has_data = false;
    for (absl::string_view line : absl::StrSplit(absl::string_view(buffer_).substr(0, end), '\n')) {
      absl::ConsumeSuffix(&line, "\r");
      if (!absl::ConsumePrefix(&line, "data:")) continue;  // comments, event:, id:, retry:
      absl::ConsumePrefix(&line, " ");
      if (has_data) data.push_back('\n');
      data.append(line.data(), line.size());
      has_data = true;
    }
    buffer_.erase(0, end + skip);
    if (has_data) events.push_back(std::move(data));
  }
  return events;
}

CompletionChunk ParseCompletionChunk(absl::string_view data) {
  CompletionChunk chunk;
  if (absl::StripAsciiWhitespace(data) == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  const nlohmann::json j = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    chunk.malformed = true;
    return chunk;
  }
  if (auto e = j.find("error"); e != j.end()) {
    chunk.error = true;
    if (e->is_object()) {
      chunk.error_type = e->value("type", "");
      chunk.error_message = e->value("message", "");
    }
    return chunk;
  }
  if (auto id = j.find("session_id"); id != j.end() && id->is_string()) {
    chunk.session_id = id->get<std::string>();
  }
  auto usage = j.find("usage");
  const bool has_usage = usage != j.end() && usage->is_object();
  if (has_usage) {
    chunk.has_usage = true;
    chunk.prompt_tokens = usage->value("prompt_tokens", 0);
    chunk.completion_tokens = usage->value("completion_tokens", 0);
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) {
    chunk.malformed = true;
    return chunk;
  }
  // stream_options.include_usage: the usage comes in a last chunk of its own, "choices": [].
  if (choices->empty()) {
    chunk.malformed = !has_usage;
    return chunk;
  }
  const nlohmann::json& choice = (*choices)[0];
  if (!choice.is_object()) {
    chunk.malformed = true;
    return chunk;
  }
  if (auto t = choice.find("text"); t != choice.end() && t->is_string()) {
    chunk.text = t->get<std::string>();
  }
  return chunk;
}

}  // namespace abcd::loadtest
