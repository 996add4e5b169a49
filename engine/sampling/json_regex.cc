// json_regex.h: a recursive-descent parser to an AST, Thompson's NFA, the subset construction
// over the generated alphabet, then dead states removed.
#include "engine/sampling/json_regex.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace abcd {
namespace {

using CharSet = std::bitset<JsonDfa::kChars>;

constexpr int kMaxRepeat = 1000;
constexpr size_t kMaxNfaStates = 20000;
constexpr size_t kMaxDfaStates = 4000;

struct Ast {
  enum class Kind { kSet, kConcat, kAlt, kRepeat } kind = Kind::kConcat;
  CharSet set;
  std::vector<std::unique_ptr<Ast>> children;
  int min = 0;
  int max = -1;  // kRepeat: -1 unbounded
};

CharSet Range(int lo, int hi) {
  CharSet s;
  for (int c = lo; c <= hi; ++c) s.set(c);
  return s;
}
CharSet Digits() { return Range('0', '9'); }
CharSet Word() { return Range('0', '9') | Range('A', 'Z') | Range('a', 'z') | Range('_', '_'); }
CharSet Space() { return Range('\t', '\r') | Range(' ', ' '); }

class Parser {
 public:
  // `base`: the offset of `text` in the pattern (errors name offsets in the pattern).
  Parser(absl::string_view text, std::string path, size_t base)
      : s_(text), path_(std::move(path)), base_(base) {}

  // A group's body up to its ')': *end is the offset after it.
  absl::StatusOr<std::unique_ptr<Ast>> ParseGroup(size_t* end) {
    auto ast = Alt();
    if (!ast.ok()) return ast.status();
    if (!More() || Peek() != ')') return Error("an unclosed lookahead");
    *end = i_ + 1;
    return ast;
  }

  absl::StatusOr<std::unique_ptr<Ast>> Parse() {
    auto ast = Alt();
    if (!ast.ok()) return ast.status();
    if (i_ < s_.size()) return Error(absl::StrCat("unmatched '", s_.substr(i_, 1), "'"));
    return ast;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": ", what, " at offset ", base_ + i_, " is not supported"));
  }
  bool More() const { return i_ < s_.size(); }
  char Peek() const { return s_[i_]; }

  absl::StatusOr<std::unique_ptr<Ast>> Alt() {
    auto alt = std::make_unique<Ast>();
    alt->kind = Ast::Kind::kAlt;
    while (true) {
      auto seq = Concat();
      if (!seq.ok()) return seq.status();
      alt->children.push_back(std::move(*seq));
      if (!More() || Peek() != '|') break;
      ++i_;
    }
    return alt;
  }

  absl::StatusOr<std::unique_ptr<Ast>> Concat() {
    auto seq = std::make_unique<Ast>();
    while (More() && Peek() != '|' && Peek() != ')') {
      auto atom = Atom();
      if (!atom.ok()) return atom.status();
      std::unique_ptr<Ast> item = std::move(*atom);
      while (More()) {
        int min = 0, max = -1;
        const char q = Peek();
        if (q == '*') {
          ++i_;
        } else if (q == '+') {
          min = 1;
          ++i_;
        } else if (q == '?') {
          max = 1;
          ++i_;
        } else if (q != '{' || !Braces(&min, &max)) {
          break;
        } else if (min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && max < min)) {
          return Error(absl::StrCat("a repeat count above ", kMaxRepeat, " or a reversed one"));
        }
        if (More() && Peek() == '?') ++i_;  // lazy: the same language
        auto repeat = std::make_unique<Ast>();
        repeat->kind = Ast::Kind::kRepeat;
        repeat->min = min;
        repeat->max = max;
        repeat->children.push_back(std::move(item));
        item = std::move(repeat);
      }
      seq->children.push_back(std::move(item));
    }
    return seq;
  }

  // {n}, {n,}, {n,m}: true and consumed when it is one (otherwise '{' is a literal).
  bool Braces(int* min, int* max) {
    size_t j = i_ + 1;
    auto number = [&](int* out) {
      const size_t begin = j;
      long long v = 0;
      while (j < s_.size() && s_[j] >= '0' && s_[j] <= '9' && v <= kMaxRepeat) {
        v = v * 10 + (s_[j++] - '0');
      }
      *out = static_cast<int>(std::min<long long>(v, kMaxRepeat + 1));
      return j > begin;
    };
    if (!number(min)) return false;
    *max = *min;
    if (j < s_.size() && s_[j] == ',') {
      ++j;
      *max = -1;
      if (j < s_.size() && s_[j] != '}' && !number(max)) return false;
    }
    if (j >= s_.size() || s_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  absl::StatusOr<std::unique_ptr<Ast>> Atom() {
    auto leaf = std::make_unique<Ast>();
    leaf->kind = Ast::Kind::kSet;
    const char c = Peek();
    if (c == '(') {
      ++i_;
      if (More() && Peek() == '?') {
        if (i_ + 1 < s_.size() && s_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return Error("a lookaround or named group");
        }
      }
      auto inner = Alt();
      if (!inner.ok()) return inner.status();
      if (!More() || Peek() != ')') return Error("an unclosed group");
      ++i_;
      return inner;
    }
    if (c == '*' || c == '+' || c == '?') return Error("a quantifier with nothing to repeat");
    if (c == '^' || c == '$') return Error("an anchor not at the pattern's start or end");
    ++i_;
    if (c == '.') {
      leaf->set = Range(0, JsonDfa::kChars - 1);
      leaf->set.reset('\n').reset('\r');
    } else if (c == '[') {
      absl::Status st = Class(&leaf->set);
      if (!st.ok()) return st;
    } else if (c == '\\') {
      absl::Status st = Escape(&leaf->set);
      if (!st.ok()) return st;
    } else if (static_cast<uint8_t>(c) < JsonDfa::kChars) {
      leaf->set.set(static_cast<uint8_t>(c));
    }  // a non-ASCII byte: the empty set (never generated)
    return leaf;
  }

  absl::Status Escape(CharSet* set) {
    if (!More()) return Error("a trailing backslash");
    const char c = s_[i_++];
    switch (c) {
      case 'd':
        *set = Digits();
        return absl::OkStatus();
      case 'D':
        *set = ~Digits();
        return absl::OkStatus();
      case 'w':
        *set = Word();
        return absl::OkStatus();
      case 'W':
        *set = ~Word();
        return absl::OkStatus();
      case 's':
        *set = Space();
        return absl::OkStatus();
      case 'S':
        *set = ~Space();
        return absl::OkStatus();
      case 't':
      case 'n':
      case 'r':
      case 'f':
      case 'v':
      case '0':
        set->reset();  // control characters: never generated
        return absl::OkStatus();
      default:
        break;
    }
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alnum || static_cast<uint8_t>(c) >= JsonDfa::kChars) {
      --i_;
      return Error(absl::StrCat("the escape \\", std::string(1, c)));
    }
    set->set(static_cast<uint8_t>(c));
    return absl::OkStatus();
  }

  // One class member: a character (*single, -1 for a non-ASCII byte) or a class escape (*set).
  absl::Status ClassAtom(CharSet* set, int* single) {
    const char c = s_[i_++];
    *single = static_cast<uint8_t>(c) < JsonDfa::kChars ? static_cast<uint8_t>(c) : -1;
    if (c != '\\') return absl::OkStatus();
    if (!More()) return Error("a trailing backslash");
    const char e = Peek();
    static constexpr absl::string_view kControls = "tnrfv0b";
    static constexpr char kControlCodes[] = {'\t', '\n', '\r', '\f', '\v', 0, '\b'};
    if (const size_t k = kControls.find(e); k != absl::string_view::npos) {
      ++i_;
      *single = kControlCodes[k];
      return absl::OkStatus();
    }
    if (absl::string_view("dDwWsS").find(e) != absl::string_view::npos) {
      *single = -2;  // a class escape
      return Escape(set);
    }
    CharSet one;
    absl::Status st = Escape(&one);  // an escaped punctuation character
    if (!st.ok()) return st;
    for (int k = 0; k < JsonDfa::kChars; ++k) {
      if (one.test(k)) *single = k;
    }
    return absl::OkStatus();
  }

  absl::Status Class(CharSet* set) {
    bool negate = false;
    if (More() && Peek() == '^') {
      negate = true;
      ++i_;
    }
    CharSet out;
    while (true) {
      if (!More()) return Error("an unclosed character class");
      if (Peek() == ']') {
        ++i_;
        break;
      }
      CharSet item;
      int lo = -1;
      absl::Status st = ClassAtom(&item, &lo);
      if (!st.ok()) return st;
      if (lo == -2) {
        out |= item;
        continue;
      }
      if (i_ + 1 < s_.size() && Peek() == '-' && s_[i_ + 1] != ']') {
        ++i_;
        int hi = -1;
        st = ClassAtom(&item, &hi);
        if (!st.ok()) return st;
        if (lo == -2 || hi == -2) return Error("a range with a class escape");
        if (lo >= 0 && hi >= 0 && lo > hi) return Error("a reversed range");
        if (lo >= 0) out |= Range(lo, hi < 0 ? JsonDfa::kChars - 1 : hi);
        continue;
      }
      if (lo >= 0) out.set(lo);
    }
    *set = negate ? ~out : out;
    return absl::OkStatus();
  }

  absl::string_view s_;
  std::string path_;
  size_t base_ = 0;
  size_t i_ = 0;
};

// Thompson's construction: each state has epsilon edges and at most one character edge.
struct Nfa {
  std::vector<std::vector<int>> eps;
  std::vector<CharSet> sets;
  std::vector<int> to;  // the character edge's target, or -1

  int Add() {
    eps.emplace_back();
    sets.emplace_back();
    to.push_back(-1);
    return static_cast<int>(to.size()) - 1;
  }
  // The fragment [start, end] of `ast`; false when the NFA grows past kMaxNfaStates.
  bool Build(const Ast& ast, int* start, int* end) {
    if (to.size() > kMaxNfaStates) return false;
    *start = Add();
    *end = Add();
    switch (ast.kind) {
      case Ast::Kind::kSet:
        sets[*start] = ast.set;
        to[*start] = *end;
        return true;
      case Ast::Kind::kConcat: {
        int at = *start;
        for (const auto& child : ast.children) {
          int s = 0, e = 0;
          if (!Build(*child, &s, &e)) return false;
          eps[at].push_back(s);
          at = e;
        }
        eps[at].push_back(*end);
        return true;
      }
      case Ast::Kind::kAlt:
        for (const auto& child : ast.children) {
          int s = 0, e = 0;
          if (!Build(*child, &s, &e)) return false;
          eps[*start].push_back(s);
          eps[e].push_back(*end);
        }
        return true;
      case Ast::Kind::kRepeat: {
        int at = *start;
        const Ast& child = *ast.children[0];
        for (int i = 0; i < ast.min; ++i) {
          int s = 0, e = 0;
          if (!Build(child, &s, &e)) return false;
          eps[at].push_back(s);
          at = e;
        }
        if (ast.max < 0) {
          int s = 0, e = 0;
          if (!Build(child, &s, &e)) return false;
          eps[at].push_back(s);
          eps[e].push_back(at);
        } else {
          for (int i = ast.min; i < ast.max; ++i) {
            int s = 0, e = 0;
            if (!Build(child, &s, &e)) return false;
            eps[at].push_back(s);
            eps[at].push_back(*end);
            at = e;
          }
        }
        eps[at].push_back(*end);
        return true;
      }
    }
    return false;
  }

  void Close(std::vector<int>* set) const {
    std::vector<int> stack = *set;
    std::vector<bool> in(to.size(), false);
    for (int v : *set) in[v] = true;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      for (int w : eps[v]) {
        if (!in[w]) {
          in[w] = true;
          set->push_back(w);
          stack.push_back(w);
        }
      }
    }
    std::sort(set->begin(), set->end());
  }
};

// Removes the states that cannot reach an accepting one, start (state `start`) first; false
// when the start is one of them.
bool Prune(const std::vector<int32_t>& next, const std::vector<uint8_t>& accepting, int start,
           JsonDfa* out) {
  const int n = static_cast<int>(accepting.size());
  std::vector<std::vector<int>> from(n);
  for (int v = 0; v < n; ++v) {
    for (int c = 0; c < JsonDfa::kChars; ++c) {
      if (const int w = next[v * JsonDfa::kChars + c]; w >= 0) from[w].push_back(v);
    }
  }
  std::vector<bool> alive(n, false);
  std::vector<int> stack;
  for (int v = 0; v < n; ++v) {
    if (accepting[v]) {
      alive[v] = true;
      stack.push_back(v);
    }
  }
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int u : from[v]) {
      if (!alive[u]) {
        alive[u] = true;
        stack.push_back(u);
      }
    }
  }
  if (!alive[start]) return false;
  std::vector<int> id(n, -1);
  int count = 0;
  id[start] = count++;
  for (int v = 0; v < n; ++v) {
    if (alive[v] && v != start) id[v] = count++;
  }
  out->next.assign(static_cast<size_t>(count) * JsonDfa::kChars, -1);
  out->accepting.assign(count, 0);
  for (int v = 0; v < n; ++v) {
    if (id[v] < 0) continue;
    out->accepting[id[v]] = accepting[v];
    for (int c = 0; c < JsonDfa::kChars; ++c) {
      const int w = next[v * JsonDfa::kChars + c];
      if (w >= 0 && id[w] >= 0) out->next[id[v] * JsonDfa::kChars + c] = id[w];
    }
  }
  return true;
}

}  // namespace

namespace {

std::unique_ptr<Ast> AnyString() {
  auto leaf = std::make_unique<Ast>();
  leaf->kind = Ast::Kind::kSet;
  leaf->set = Range(0, JsonDfa::kChars - 1);
  auto star = std::make_unique<Ast>();
  star->kind = Ast::Kind::kRepeat;
  star->children.push_back(std::move(leaf));
  return star;
}

// The subset construction over the alphabet: transitions (-1: none) and accepting flags, state 0
// the start, dead states kept. False when past kMaxDfaStates.
bool Determinize(const Ast& whole, std::vector<int32_t>* next, std::vector<uint8_t>* accepting) {
  Nfa nfa;
  int start = 0, end = 0;
  if (!nfa.Build(whole, &start, &end)) return false;
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  std::vector<int> first = {start};
  nfa.Close(&first);
  ids[first] = 0;
  sets.push_back(first);
  for (size_t v = 0; v < sets.size(); ++v) {
    next->resize((v + 1) * JsonDfa::kChars, -1);
    const std::vector<int> from = sets[v];
    accepting->push_back(std::binary_search(from.begin(), from.end(), end) ? 1 : 0);
    for (int c = 0; c < JsonDfa::kChars; ++c) {
      if (!DfaAlphabet(static_cast<uint8_t>(c))) continue;
      std::vector<int> moved;
      for (int u : from) {
        if (nfa.to[u] >= 0 && nfa.sets[u].test(c)) moved.push_back(nfa.to[u]);
      }
      if (moved.empty()) continue;
      std::sort(moved.begin(), moved.end());
      moved.erase(std::unique(moved.begin(), moved.end()), moved.end());
      nfa.Close(&moved);
      auto [it, added] = ids.try_emplace(moved, static_cast<int>(sets.size()));
      if (added) {
        if (sets.size() >= kMaxDfaStates) return false;
        sets.push_back(moved);
      }
      (*next)[v * JsonDfa::kChars + c] = it->second;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<JsonDfa> CompilePattern(absl::string_view pattern, absl::string_view path) {
  const std::string where(path);
  absl::string_view body = pattern;
  const bool anchored_start = !body.empty() && body.front() == '^';
  if (anchored_start) body.remove_prefix(1);
  const absl::Status too_complex = absl::InvalidArgumentError(absl::StrCat(
      where, ": the pattern is too complex (more than ", kMaxDfaStates, " automaton states)"));
  // Negative lookaheads right after '^' (zod's email: ^(?!\.)(?!.*\.\.)...): the string does not
  // start with a match of X, i.e. it is outside X followed by anything.
  std::vector<JsonDfa> excluded;
  while (anchored_start && absl::StartsWith(body, "(?!")) {
    Parser group(body.substr(3), where, static_cast<size_t>(body.data() - pattern.data()) + 3);
    size_t end = 0;
    auto x = group.ParseGroup(&end);
    if (!x.ok()) return x.status();
    body.remove_prefix(3 + end);
    Ast prefixed;
    prefixed.children.push_back(std::move(*x));
    prefixed.children.push_back(AnyString());
    std::vector<int32_t> next;
    std::vector<uint8_t> accepting;
    if (!Determinize(prefixed, &next, &accepting)) return too_complex;
    // The complement: a sink for the missing transitions, accepting flipped.
    const int sink = static_cast<int>(accepting.size());
    next.resize((sink + 1) * JsonDfa::kChars, -1);
    accepting.push_back(0);
    for (int v = 0; v <= sink; ++v) {
      accepting[v] = !accepting[v];
      for (int c = 0; c < JsonDfa::kChars; ++c) {
        int32_t& to = next[v * JsonDfa::kChars + c];
        if (DfaAlphabet(static_cast<uint8_t>(c)) && to < 0) to = sink;
      }
    }
    JsonDfa complement;
    if (!Prune(next, accepting, 0, &complement)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": its lookahead (?!...) excludes every string"));
    }
    excluded.push_back(std::move(complement));
  }
  size_t backslashes = 0;
  while (backslashes + 1 < body.size() && body[body.size() - 2 - backslashes] == '\\') {
    ++backslashes;
  }
  const bool anchored_end = !body.empty() && body.back() == '$' && backslashes % 2 == 0;
  if (anchored_end) body.remove_suffix(1);
  Parser parser(body, where, static_cast<size_t>(body.data() - pattern.data()));
  auto parsed = parser.Parse();
  if (!parsed.ok()) return parsed.status();
  // Unanchored ends: any characters there (a search, as JSON Schema's pattern is).
  Ast whole;
  if (!anchored_start) whole.children.push_back(AnyString());
  whole.children.push_back(std::move(*parsed));
  if (!anchored_end) whole.children.push_back(AnyString());
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  if (!Determinize(whole, &next, &accepting)) return too_complex;
  JsonDfa dfa;
  const absl::Status none = absl::InvalidArgumentError(absl::StrCat(
      where, ": no string of printable ASCII characters other than '\"' and '\\' matches it"));
  if (!Prune(next, accepting, 0, &dfa)) return none;
  for (const JsonDfa& allowed : excluded) {
    auto both = IntersectDfas(dfa, allowed, where);
    if (!both.ok()) return none;
    dfa = std::move(*both);
  }
  return dfa;
}

absl::StatusOr<JsonDfa> IntersectDfas(const JsonDfa& a, const JsonDfa& b, absl::string_view path) {
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> pairs = {{0, 0}};
  ids[{0, 0}] = 0;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  for (size_t v = 0; v < pairs.size(); ++v) {
    const auto [x, y] = pairs[v];
    next.resize((v + 1) * JsonDfa::kChars, -1);
    accepting.push_back(a.accepting[x] && b.accepting[y]);
    for (int c = 0; c < JsonDfa::kChars; ++c) {
      const int nx = a.Next(x, static_cast<uint8_t>(c));
      const int ny = b.Next(y, static_cast<uint8_t>(c));
      if (nx < 0 || ny < 0) continue;
      auto [it, added] = ids.try_emplace({nx, ny}, static_cast<int>(pairs.size()));
      if (added) {
        if (pairs.size() >= kMaxDfaStates) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ": format and pattern together are too complex (more than ",
                           kMaxDfaStates, " automaton states)"));
        }
        pairs.emplace_back(nx, ny);
      }
      next[v * JsonDfa::kChars + c] = it->second;
    }
  }
  JsonDfa dfa;
  if (!Prune(next, accepting, 0, &dfa)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no string satisfies both its format and its pattern"));
  }
  return dfa;
}

std::string FormatPattern(absl::string_view format) {
  static constexpr char kDate[] =
      R"(\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30))"
      R"(|02-(?:0[1-9]|1\d|2[0-8])))";
  static constexpr char kTime[] =
      R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
  static constexpr char kOctet[] = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static constexpr char kLabel[] = R"([a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?)";
  if (format == "date") return absl::StrCat("^", kDate, "$");
  if (format == "time") return absl::StrCat("^", kTime, "$");
  if (format == "date-time") return absl::StrCat("^", kDate, "T", kTime, "$");
  if (format == "uuid") {
    return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
  }
  if (format == "ipv4") return absl::StrCat("^(?:", kOctet, R"(\.){3})", kOctet, "$");
  if (format == "email") {
    return absl::StrCat(R"(^[a-z0-9_+-]{1,20}(?:\.[a-z0-9_+-]{1,20}){0,2}@(?:)", kLabel,
                        R"(\.){1,3}[a-z]{2,8}$)");
  }
  return "";
}

}  // namespace abcd
