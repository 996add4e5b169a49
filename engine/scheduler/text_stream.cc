#include "engine/scheduler/text_stream.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace abcd {
namespace {

constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0;
}

// Bytes `a` and `b` share at the front, backed off to a UTF-8 character boundary.
size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  while (n > 0 && n < a.size() && (static_cast<unsigned char>(a[n]) & 0xc0) == 0x80) --n;
  return n;
}

}  // namespace

std::span<const int32_t> TextStream::ContextTail(const Tokenizer& tokenizer,
                                                 std::span<const int32_t> preceding) {
  // A decode drops the leading spaces of its first pieces until one has text, so a tail that
  // decodes to nothing (bos, whitespace-only pieces) would drop the first new piece's space
  // too. Doubling keeps the search O(n log n) in the worst case and one decode in the usual.
  for (size_t n = kContextTokens;; n *= 2) {
    if (n >= preceding.size()) return preceding;
    std::span<const int32_t> tail = preceding.last(n);
    absl::StatusOr<std::string> text = tokenizer.Decode(tail);
    if (!text.ok() || !text->empty()) return tail;
  }
}

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop,
                       std::span<const int32_t> preceding)
    : tokenizer_(tokenizer), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const std::string& s : stop_) max_stop_ = std::max(max_stop_, s.size());
  const std::span<const int32_t> tail = ContextTail(tokenizer_, preceding);
  absl::StatusOr<std::string> text = tokenizer_.Decode(tail);
  if (!text.ok()) return;  // ids the tokenizer refuses: decode the new ids on their own
  tokens_.assign(tail.begin(), tail.end());
  context_ = read_offset_ = tokens_.size();
  context_text_ = prefix_text_ = *std::move(text);
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
    // The new ids changed the window's earlier text (a preceding incomplete character that
    // they complete): decode everything once, as the whole-text scheme would, and take what
    // follows the preceding ids' text; released text is never released again.
    ABCD_ASSIGN_OR_RETURN(std::string all, DecodeRange(0, tokens_.size()));
    text_.clear();
    AddText(all.substr(CommonPrefix(all, context_text_)));
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
