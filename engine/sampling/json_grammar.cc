// The matcher of json_grammar.h (the schema compiler is in json_schema.cc).
#include "engine/sampling/json_grammar.h"

#include <algorithm>
#include <bit>
#include <string_view>

namespace abcd {

// Frame phases. Root: kRootValue (leading whitespace, then the value), kRootDone.
// Objects and arrays: kStart (the opening character), kOpen (after it), kKey (schema object:
// matching a property name), kColon, kValue, kAfter (after a value: ',' or the close), kComma.
// Strings: kStart, kBody, kEscape, kHex (pos hex digits read; a = 1 after a leading 'd'),
// kUtf8 (pos continuation bytes left, a = lowest | highest << 8 for the next one).
// Numbers: kStart, kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits.
// Literals: kStart, kBody (range [a, b) of the sorted literals agrees with the pos bytes taken).
namespace {

enum : uint8_t { kRootValue = 0, kRootDone = 1 };
enum : uint8_t { kStart = 0 };
enum : uint8_t { kOpen = 1, kKey, kColon, kValue, kAfter, kComma };
enum : uint8_t { kBody = 1, kEscape, kHex, kUtf8 };
enum : uint8_t { kMinus = 1, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

constexpr int kMaxNumberDigits = 15;
constexpr int kMaxExponentDigits = 2;  // 15 digits e99 stays within a double

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
bool IsHex(uint8_t b) { return IsDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

// A string node with no length bound and no DFA.
bool PlainString(const JsonNode& n) {
  return n.dfa < 0 && n.min_length == 0 && n.max_length == kUnboundedLength;
}

// Whether a bounded number's integer part with magnitude `p` (`digits` digits) can still grow
// into one in [lo, hi] (appending up to kMaxNumberDigits - digits digits; "0" cannot grow).
bool CanReach(uint64_t p, int digits, int64_t lo, int64_t hi) {
  if (lo > hi) return false;
  uint64_t scale = 1;
  for (int k = 0; digits + k <= kMaxNumberDigits; ++k, scale *= 10) {
    const uint64_t first = p * scale;
    const uint64_t last = first + scale - 1;
    if (first <= static_cast<uint64_t>(hi) &&
        last >= static_cast<uint64_t>(std::max<int64_t>(lo, 0))) {
      return true;
    }
    if (p == 0 && digits > 0) break;
  }
  return false;
}

bool InRange(uint64_t p, int64_t lo, int64_t hi) {
  return lo <= hi && p >= static_cast<uint64_t>(std::max<int64_t>(lo, 0)) &&
         p <= static_cast<uint64_t>(hi);
}

}  // namespace

JsonMatcher::JsonMatcher(const JsonGrammar* grammar) : grammar_(grammar) {
  if (grammar_ == nullptr) return;
  stack_[0] = Frame{-1, kRootValue, 0, 0, 0, 0, 0};
  size_ = 1;
}

bool JsonMatcher::Advance(absl::string_view bytes) {
  for (const char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool JsonMatcher::Advance(uint8_t byte) {
  while (size_ > 0) {
    int child = -1;
    switch (StepFrame(stack_[size_ - 1], byte, &child)) {
      case Step::kReject:
        return false;
      case Step::kTaken:
        return true;
      case Step::kTakenPop:
        Retag();
        --size_;
        return true;
      case Step::kPush:
        // Only a value that can be completed in the frames left (min_depth >= 1).
        if (size_ + grammar_->node(child).min_depth > kMaxJsonDepth) return false;
        stack_[size_++] = Frame{child, kStart, 0, 0, 0, 0, 0};
        break;
      case Step::kPopRetry:
        Retag();
        --size_;
        break;
    }
  }
  return false;
}

void JsonMatcher::Retag() {
  if (size_ < 2) return;
  Frame& parent = stack_[size_ - 2];
  if (parent.node < 0) return;
  const JsonNode& n = grammar_->node(parent.node);
  // The tag's literal (the top frame, literals[a] complete) picks the alternative.
  if (!n.tag_targets.empty()) parent.node = n.tag_targets[stack_[size_ - 1].a];
}

bool JsonMatcher::MayEnd(const Frame& f) const {
  const JsonNode& n = grammar_->node(f.node);
  if (n.kind == JsonNode::Kind::kNumber) {
    if (n.bounded && (f.phase == kZero || f.phase == kInt)) {
      return InRange(f.mask, n.end_lo[f.b], n.end_hi[f.b]);
    }
    return f.phase == kZero || f.phase == kInt || f.phase == kFrac || f.phase == kExpDigits;
  }
  return n.kind == JsonNode::Kind::kLiterals && f.phase == kBody && f.a < f.b &&
         n.literals[f.a].size() == f.pos;
}

bool JsonMatcher::accepting() const {
  for (int i = size_ - 1; i >= 0; --i) {
    if (stack_[i].node < 0) return stack_[i].phase == kRootDone;
    if (!MayEnd(stack_[i])) return false;
  }
  return false;
}

bool JsonMatcher::complete() const { return size_ == 1 && stack_[0].phase == kRootDone; }

bool JsonMatcher::InStringBody() const {
  if (size_ == 0) return false;
  const Frame& top = stack_[size_ - 1];
  if (top.node < 0 || top.phase != kBody) return false;
  const JsonNode& n = grammar_->node(top.node);
  return n.kind == JsonNode::Kind::kString && PlainString(n);
}

std::string JsonMatcher::Key() const {
  return std::string(reinterpret_cast<const char*>(stack_), sizeof(Frame) * size_);
}

bool JsonMatcher::TakeWhitespace(Frame& f, uint8_t byte) {
  if (byte != ' ' && byte != '\n') return false;
  if (f.ws >= kMaxWhitespace) return false;
  ++f.ws;
  return true;
}

JsonMatcher::Step JsonMatcher::StepFrame(Frame& f, uint8_t byte, int* child) {
  if (f.node < 0) return StepRoot(f, byte, child);
  const JsonNode& n = grammar_->node(f.node);
  switch (n.kind) {
    case JsonNode::Kind::kObject:
    case JsonNode::Kind::kFreeObject:
      return StepObject(f, n, byte, child);
    case JsonNode::Kind::kArray:
      return StepArray(f, n, byte, child);
    case JsonNode::Kind::kString:
      return StepString(f, n, byte);
    case JsonNode::Kind::kNumber:
      return StepNumber(f, n, byte);
    case JsonNode::Kind::kLiterals:
      return StepLiterals(f, n, byte);
    case JsonNode::Kind::kUnion:
      break;  // resolved before a frame is pushed
  }
  return Step::kReject;
}

JsonMatcher::Step JsonMatcher::StepRoot(Frame& f, uint8_t byte, int* child) {
  if (f.phase != kRootValue) return Step::kReject;
  if (TakeWhitespace(f, byte)) return Step::kTaken;
  *child = grammar_->Resolve(grammar_->root(), byte);
  if (*child < 0) return Step::kReject;
  f.phase = kRootDone;
  f.ws = 0;
  return Step::kPush;
}

JsonMatcher::Step JsonMatcher::StepObject(Frame& f, const JsonNode& n, uint8_t byte, int* child) {
  const bool free = n.kind == JsonNode::Kind::kFreeObject;
  const uint32_t count = static_cast<uint32_t>(n.keys.size());
  // '}' may come when no required property is left (f.a: the next property to consider).
  const bool may_close = free || n.next_required[f.a] == static_cast<int>(count);
  // Candidates: the next property up to and including the first required one, those whose
  // value can be completed in the frames left above this one (a required one always can: its
  // object was only started where it could be completed).
  auto candidates = [&]() -> uint64_t {
    if (f.a >= count) return 0;
    const uint32_t last = std::min<uint32_t>(n.next_required[f.a], count - 1);
    uint64_t mask = 0;
    for (uint32_t i = f.a; i <= last; ++i) {
      if (size_ + grammar_->node(n.values[i]).min_depth <= kMaxJsonDepth) {
        mask |= uint64_t{1} << i;
      }
    }
    return mask;
  };
  auto begin_key = [&]() -> Step {
    if (byte != '"') return Step::kReject;
    f.ws = 0;
    if (free) {
      f.phase = kColon;
      *child = n.alternatives[0];
      return Step::kPush;
    }
    f.mask = candidates();
    if (f.mask == 0) return Step::kReject;
    f.pos = 1;  // every key starts with '"'
    f.phase = kKey;
    return Step::kTaken;
  };
  switch (f.phase) {
    case kStart:
      if (byte != '{') return Step::kReject;
      f.phase = kOpen;
      return Step::kTaken;
    case kOpen:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == '}') return may_close ? Step::kTakenPop : Step::kReject;
      return begin_key();
    case kComma:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      return begin_key();
    case kKey: {
      uint64_t mask = 0;
      for (uint64_t m = f.mask; m != 0; m &= m - 1) {
        const int i = std::countr_zero(m);
        const std::string& key = n.keys[i];
        if (key.size() > f.pos && static_cast<uint8_t>(key[f.pos]) == byte)
          mask |= uint64_t{1} << i;
      }
      if (mask == 0) return Step::kReject;
      f.mask = mask;
      ++f.pos;
      const int first = std::countr_zero(mask);
      if ((mask & (mask - 1)) == 0 && n.keys[first].size() == f.pos) {
        f.a = static_cast<uint32_t>(first) + 1;  // the property being written is f.a - 1
        f.phase = kColon;
        f.mask = 0;
        f.pos = 0;
      }
      return Step::kTaken;
    }
    case kColon:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte != ':') return Step::kReject;
      f.phase = kValue;
      f.ws = 0;
      return Step::kTaken;
    case kValue:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      *child = grammar_->Resolve(free ? n.value : n.values[f.a - 1], byte);
      if (*child < 0) return Step::kReject;
      f.phase = kAfter;
      f.ws = 0;
      return Step::kPush;
    case kAfter:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == '}') return may_close ? Step::kTakenPop : Step::kReject;
      if (byte != ',' || (!free && candidates() == 0)) return Step::kReject;
      f.phase = kComma;
      f.ws = 0;
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepArray(Frame& f, const JsonNode& n, uint8_t byte, int* child) {
  switch (f.phase) {
    case kStart:
      if (byte != '[') return Step::kReject;
      f.phase = kOpen;
      return Step::kTaken;
    case kOpen:
    case kComma:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (f.phase == kOpen && byte == ']') {
        return n.min_items == 0 ? Step::kTakenPop : Step::kReject;
      }
      if (f.a >= static_cast<uint32_t>(n.max_items)) return Step::kReject;
      *child = grammar_->Resolve(n.value, byte);
      if (*child < 0) return Step::kReject;
      ++f.a;
      f.phase = kAfter;
      f.ws = 0;
      return Step::kPush;
    case kAfter:
      if (TakeWhitespace(f, byte)) return Step::kTaken;
      if (byte == ']') {
        return f.a >= static_cast<uint32_t>(n.min_items) ? Step::kTakenPop : Step::kReject;
      }
      if (byte != ',' || f.a >= static_cast<uint32_t>(n.max_items)) return Step::kReject;
      f.phase = kComma;
      f.ws = 0;
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepConstrainedChar(Frame& f, const JsonNode& n, uint8_t byte) {
  const uint32_t count = f.b + 1;
  if (count > static_cast<uint32_t>(n.max_length)) return Step::kReject;
  if (n.dfa >= 0) {
    if (!DfaAlphabet(byte)) return Step::kReject;
    const JsonDfa& dfa = grammar_->dfa(n.dfa);
    const int next = dfa.Next(static_cast<int>(f.mask), byte);
    if (next < 0) return Step::kReject;
    const size_t row = static_cast<size_t>(count) * static_cast<size_t>(dfa.states());
    if (row < n.live.size() && !n.live[row + static_cast<size_t>(next)]) return Step::kReject;
    f.mask = static_cast<uint64_t>(next);
  }
  f.b = count;
  return Step::kTaken;
}

JsonMatcher::Step JsonMatcher::StepString(Frame& f, const JsonNode& n, uint8_t byte) {
  switch (f.phase) {
    case kStart:
      if (byte != '"') return Step::kReject;
      f.phase = kBody;
      return Step::kTaken;
    case kBody: {
      const bool plain = PlainString(n);
      if (byte == '"') {
        if (plain) return Step::kTakenPop;
        if (f.b < static_cast<uint32_t>(n.min_length)) return Step::kReject;
        if (n.dfa >= 0 && !grammar_->dfa(n.dfa).accepting[f.mask]) return Step::kReject;
        return Step::kTakenPop;
      }
      if (n.dfa >= 0) return StepConstrainedChar(f, n, byte);
      // Every character starts with an ASCII byte, a UTF-8 lead byte or a backslash.
      if (!plain && (byte < 0x80 || byte >= 0xc0) && byte >= 0x20 &&
          StepConstrainedChar(f, n, byte) == Step::kReject) {
        return Step::kReject;
      }
      if (byte == '\\') {
        f.phase = kEscape;
        return Step::kTaken;
      }
      if (byte < 0x20) return Step::kReject;
      if (byte < 0x80) return Step::kTaken;
      // A UTF-8 lead byte: how many continuation bytes follow, and the first one's range
      // (no overlong forms, no surrogates, nothing above U+10FFFF).
      uint8_t lo = 0x80, hi = 0xbf;
      if (byte >= 0xc2 && byte <= 0xdf) {
        f.pos = 1;
      } else if (byte >= 0xe0 && byte <= 0xef) {
        f.pos = 2;
        if (byte == 0xe0) lo = 0xa0;
        if (byte == 0xed) hi = 0x9f;
      } else if (byte >= 0xf0 && byte <= 0xf4) {
        f.pos = 3;
        if (byte == 0xf0) lo = 0x90;
        if (byte == 0xf4) hi = 0x8f;
      } else {
        return Step::kReject;
      }
      f.a = lo | (uint32_t{hi} << 8);
      f.phase = kUtf8;
      return Step::kTaken;
    }
    case kUtf8:
      if (byte < (f.a & 0xff) || byte > (f.a >> 8)) return Step::kReject;
      if (--f.pos == 0) {
        f.phase = kBody;
        f.a = 0;
      } else {
        f.a = 0x80 | (0xbf << 8);
      }
      return Step::kTaken;
    case kEscape:
      if (byte == 'u') {
        f.phase = kHex;
        f.pos = 0;
        f.a = 0;
        return Step::kTaken;
      }
      if (std::string_view("\"\\/bfnrt").find(static_cast<char>(byte)) == std::string_view::npos) {
        return Step::kReject;
      }
      f.phase = kBody;
      return Step::kTaken;
    case kHex:
      if (!IsHex(byte)) return Step::kReject;
      // \uD800-\uDFFF (a surrogate) would need a pair: not generated.
      if (f.pos == 0 && (byte == 'd' || byte == 'D')) f.a = 1;
      if (f.pos == 1 && f.a == 1 && !(byte >= '0' && byte <= '7')) return Step::kReject;
      if (++f.pos == 4) {
        f.phase = kBody;
        f.pos = 0;
        f.a = 0;
      }
      return Step::kTaken;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepNumber(Frame& f, const JsonNode& n, uint8_t byte) {
  if (n.bounded) return StepBoundedNumber(f, n, byte);
  const bool digit = IsDigit(byte);
  const bool fraction = !n.integer && byte == '.';
  const bool exponent = !n.integer && (byte == 'e' || byte == 'E');
  auto to = [&f](uint8_t phase, uint16_t digits) {
    f.phase = phase;
    f.pos = digits;
    return Step::kTaken;
  };
  switch (f.phase) {
    case kStart:
    case kMinus:
      if (f.phase == kStart && byte == '-') return to(kMinus, 0);
      if (byte == '0') return to(kZero, 0);
      return digit ? to(kInt, 1) : Step::kReject;
    case kZero:
      if (fraction) return to(kDot, 0);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kInt:
      if (digit && f.pos < kMaxNumberDigits) return to(kInt, f.pos + 1);
      if (fraction) return to(kDot, 0);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kDot:
      return digit ? to(kFrac, 1) : Step::kReject;
    case kFrac:
      if (digit && f.pos < kMaxNumberDigits) return to(kFrac, f.pos + 1);
      return exponent ? to(kExp, 0) : Step::kPopRetry;
    case kExp:
      if (byte == '+' || byte == '-') return to(kExpSign, 0);
      return digit ? to(kExpDigits, 1) : Step::kReject;
    case kExpSign:
      return digit ? to(kExpDigits, 1) : Step::kReject;
    case kExpDigits:
      if (digit && f.pos < kMaxExponentDigits) return to(kExpDigits, f.pos + 1);
      return Step::kPopRetry;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepBoundedNumber(Frame& f, const JsonNode& n, uint8_t byte) {
  const int sign = static_cast<int>(f.b);
  // A digit extends the integer part's magnitude (f.mask) while some completion stays in range.
  auto digit = [&](uint8_t phase) {
    const uint64_t p = f.mask * 10 + (byte - '0');
    const int digits = f.pos + 1;
    if (digits > kMaxNumberDigits || !CanReach(p, digits, n.end_lo[sign], n.end_hi[sign])) {
      return Step::kReject;
    }
    f.mask = p;
    f.pos = static_cast<uint16_t>(digits);
    f.phase = byte == '0' && phase != kInt ? kZero : kInt;
    return Step::kTaken;
  };
  auto after_integer = [&]() {
    if (!n.integer && byte == '.') {
      if (!InRange(f.mask, n.frac_lo[sign], n.frac_hi[sign])) return Step::kReject;
      f.phase = kDot;
      return Step::kTaken;
    }
    return InRange(f.mask, n.end_lo[sign], n.end_hi[sign]) ? Step::kPopRetry : Step::kReject;
  };
  switch (f.phase) {
    case kStart:
      if (byte == '-') {
        if (!CanReach(0, 0, n.end_lo[1], n.end_hi[1])) return Step::kReject;
        f.b = 1;
        f.phase = kMinus;
        return Step::kTaken;
      }
      [[fallthrough]];
    case kMinus:
      return IsDigit(byte) ? digit(f.phase) : Step::kReject;
    case kZero:
      return after_integer();
    case kInt:
      if (IsDigit(byte)) return digit(kInt);
      return after_integer();
    case kDot:
      if (!IsDigit(byte)) return Step::kReject;
      f.phase = kFrac;
      f.pos = 1;
      return Step::kTaken;
    case kFrac:
      if (IsDigit(byte) && f.pos < kMaxNumberDigits) {
        ++f.pos;
        return Step::kTaken;
      }
      return Step::kPopRetry;
    default:
      return Step::kReject;
  }
}

JsonMatcher::Step JsonMatcher::StepLiterals(Frame& f, const JsonNode& n, uint8_t byte) {
  if (f.phase == kStart) {
    f.phase = kBody;
    f.a = 0;
    f.b = static_cast<uint32_t>(n.literals.size());
    f.pos = 0;
  }
  const auto& lits = n.literals;
  const size_t pos = f.pos;
  // The range agrees on its first pos bytes and is sorted, so those with `byte` next are a
  // contiguous run (a literal that ends here sorts first).
  const auto begin = lits.begin() + f.a;
  const auto end = lits.begin() + f.b;
  const auto lo = std::partition_point(begin, end, [&](const std::string& s) {
    return s.size() <= pos || static_cast<uint8_t>(s[pos]) < byte;
  });
  const auto hi = std::partition_point(
      lo, end, [&](const std::string& s) { return static_cast<uint8_t>(s[pos]) == byte; });
  if (lo == hi) return MayEnd(f) ? Step::kPopRetry : Step::kReject;
  f.a = static_cast<uint32_t>(lo - lits.begin());
  f.b = static_cast<uint32_t>(hi - lits.begin());
  ++f.pos;
  if (hi - lo == 1 && lo->size() == f.pos) return Step::kTakenPop;
  return Step::kTaken;
}

}  // namespace abcd
