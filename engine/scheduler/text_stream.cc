#include "engine/scheduler/text_stream.h"

#include <algorithm>

namespace abcd {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

absl::StatusOr<std::string> TextStream::Append(int32_t token) {
  tokens_.push_back(token);
  absl::StatusOr<std::string> decoded = tokenizer_.Decode(tokens_);
  if (!decoded.ok()) return decoded.status();
  text_ = *std::move(decoded);
  size_t cut = std::string::npos;
  for (const std::string& stop : stop_) cut = std::min(cut, text_.find(stop));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
    return Flush();
  }
  // Earlier text can change only if a new piece merges with it; never re-release bytes.
  released_ = std::min(released_, text_.size());
  const size_t end = text_.size() - HeldBackBytes();
  if (end <= released_) return std::string();
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string TextStream::Flush() {
  if (released_ >= text_.size()) return std::string();
  std::string out = text_.substr(released_);
  released_ = text_.size();
  return out;
}

size_t TextStream::HeldBackBytes() const {
  size_t hold = 0;
  // Longest suffix of the text that is a proper prefix of a stop string.
  for (const std::string& stop : stop_) {
    for (size_t n = std::min(stop.size() - 1, text_.size()); n > hold; --n) {
      if (text_.compare(text_.size() - n, n, stop, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  // An incomplete UTF-8 sequence at the end, or the replacement character SentencePiece
  // produces for a partial byte sequence.
  static constexpr char kReplacement[] = "\xef\xbf\xbd";
  if (text_.size() >= 3 && text_.compare(text_.size() - 3, 3, kReplacement) == 0) {
    hold = std::max<size_t>(hold, 3);
  }
  for (size_t back = 1; back <= std::min<size_t>(3, text_.size()); ++back) {
    const unsigned char c = static_cast<unsigned char>(text_[text_.size() - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead byte
    const size_t length = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (length > back) hold = std::max(hold, back);
    break;
  }
  return std::min(hold, text_.size() - std::min(released_, text_.size()));
}

}  // namespace abcd
