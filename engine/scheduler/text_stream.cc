#include "engine/scheduler/text_stream.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace abcd {
namespace {

constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

absl::StatusOr<std::string> TextStream::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_.Decode(std::span<const int32_t>(tokens_).subspan(begin, end - begin));
}

absl::StatusOr<std::string> TextStream::Append(int32_t token) {
  tokens_.push_back(token);
  if (stopped_) return std::string();
  ABCD_ASSIGN_OR_RETURN(std::string window, DecodeRange(prefix_offset_, tokens_.size()));
  // An incomplete character may still change with the next token: wait for it.
  if (EndsWithReplacement(window)) return std::string();
  if (window.size() >= prefix_text_.size() &&
      window.compare(0, prefix_text_.size(), prefix_text_) == 0) {
    AddText(window.substr(prefix_text_.size()));
  } else {
    // The new ids changed the window's earlier text (not seen with SentencePiece): decode
    // everything once, as the whole-text scheme would; released text is never released again.
    ABCD_ASSIGN_OR_RETURN(std::string all, DecodeRange(0, tokens_.size()));
    text_.clear();
    AddText(all);
    released_ = std::min(released_, text_.size());
  }
  // The next window starts at the ids just taken, unless they decode to nothing on their own.
  // A decode drops the leading spaces of its first pieces until one has text; with that text in
  // the window's taken part, the dropped spaces are the same with and without new ids.
  ABCD_ASSIGN_OR_RETURN(std::string taken, DecodeRange(read_offset_, tokens_.size()));
  if (!taken.empty()) {
    prefix_offset_ = read_offset_;
    prefix_text_ = std::move(taken);
  } else {
    prefix_text_ = std::move(window);
  }
  read_offset_ = tokens_.size();
  if (stopped_) return Flush();
  return Release();
}

void TextStream::AddText(const std::string& delta) {
  const size_t old_size = text_.size();
  text_ += delta;
  // Only a stop string that ends in the new text can be new.
  const size_t from = old_size >= max_stop_ ? old_size - max_stop_ + 1 : 0;
  size_t cut = std::string::npos;
  for (const std::string& stop : stop_) cut = std::min(cut, text_.find(stop, from));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
  }
}

std::string TextStream::Release() {
  const size_t end = text_.size() - HeldBackBytes();
  if (end <= released_) return std::string();
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string TextStream::Flush() {
  if (!stopped_ && read_offset_ < tokens_.size()) {
    // An incomplete character at the end: it is final now.
    absl::StatusOr<std::string> window = DecodeRange(prefix_offset_, tokens_.size());
    if (window.ok() && window->size() >= prefix_text_.size()) {
      AddText(window->substr(prefix_text_.size()));
      prefix_offset_ = read_offset_ = tokens_.size();
      prefix_text_.clear();
    }
  }
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
  // An incomplete UTF-8 sequence at the end (a piece that is itself a partial character).
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
