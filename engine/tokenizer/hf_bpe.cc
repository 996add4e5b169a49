#include "engine/tokenizer/hf_bpe.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/tokenizer/hf_unicode.h"

namespace abcd::hf {
namespace {

constexpr size_t kCacheEntries = 10000;  // per thread and model, as Hugging Face's
constexpr size_t kCacheMaxWord = 256;    // longer words are not cached

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

using WordCache = absl::flat_hash_map<std::string, std::vector<int32_t>>;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Parse(const json& spec,
                                                          const std::string& field) {
  if (!spec.is_object()) return FieldError(field, "must be an object");
  const json* type = Member(spec, "type");
  if (type != nullptr && (!type->is_string() || type->get<std::string>() != "BPE")) {
    return FieldError(Sub(field, "type"),
                      absl::StrCat("\"", TypeName(spec),
                                   "\" is not supported (only BPE models are: Unigram, "
                                   "WordPiece and WordLevel tokenizers are refused)"));
  }
  if (const json* dropout = Member(spec, "dropout");
      dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return FieldError(Sub(field, "dropout"), "BPE dropout is not supported (only null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = Member(spec, key); v != nullptr && !(v->is_string() && v->empty())) {
      return FieldError(Sub(field, key), "is not supported (only null)");
    }
  }
  std::unique_ptr<BpeModel> model(new BpeModel());
  ABCD_ASSIGN_OR_RETURN(model->byte_fallback_, BoolField(spec, field, "byte_fallback", false));
  ABCD_ASSIGN_OR_RETURN(model->ignore_merges_, BoolField(spec, field, "ignore_merges", false));
  ABCD_ASSIGN_OR_RETURN(model->fuse_unk_, BoolField(spec, field, "fuse_unk", false));
  if (const json* unk = Member(spec, "unk_token"); unk != nullptr) {
    if (!unk->is_string()) return FieldError(Sub(field, "unk_token"), "must be a string or null");
    model->unk_token_ = unk->get<std::string>();
  }

  const json* vocab = Member(spec, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return FieldError(Sub(field, "vocab"), "must be an object of token -> id");
  }
  model->vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    // Ids are dense in published files; a bound on the holes keeps a hostile file from sizing
    // the id table (and TokenBytes) at billions of entries.
    const int64_t limit = 2 * static_cast<int64_t>(vocab->size()) + 65536;
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit) {
      return FieldError(Sub(field, "vocab"),
                        absl::StrCat("the id of \"", token, "\" must be an integer in [0, ", limit,
                                     ") (twice the vocab's size + 65536)"));
    }
    const int32_t i = static_cast<int32_t>(id.get<int64_t>());
    model->vocab_[token] = i;
    if (static_cast<size_t>(i) >= model->tokens_.size()) {
      model->tokens_.resize(i + 1);
      model->has_token_.resize(i + 1, false);
    }
    if (model->has_token_[i]) {
      return FieldError(Sub(field, "vocab"), absl::StrCat("id ", i, " is given to two tokens"));
    }
    model->tokens_[i] = token;
    model->has_token_[i] = true;
  }

  const json* merges = Member(spec, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return FieldError(Sub(field, "merges"), "must be an array");
  }
  model->merges_.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& m = (*merges)[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return FieldError(absl::StrCat(field, ".merges[", rank, "]"),
                          "must be two tokens separated by one space");
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return FieldError(absl::StrCat(field, ".merges[", rank, "]"),
                        "must be \"a b\" or [\"a\", \"b\"]");
    }
    const int32_t a = model->TokenToId(left), b = model->TokenToId(right);
    const int32_t merged = model->TokenToId(left + right);
    if (a < 0 || b < 0 || merged < 0) {
      return FieldError(absl::StrCat(field, ".merges[", rank, "]"),
                        absl::StrCat("\"",
                                     a < 0   ? left
                                     : b < 0 ? right
                                             : left + right,
                                     "\" is not in the vocab"));
    }
    model->merges_[PairKey(a, b)] = {static_cast<int32_t>(rank), merged};
  }

  for (int b = 0; b < 0x80; ++b) {
    model->ascii_ids_[b] = model->TokenToId(std::string(1, static_cast<char>(b)));
  }
  model->byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    model->byte_ids_[b] = model->TokenToId(absl::StrFormat("<0x%02X>", b));
  }
  if (!model->unk_token_.empty()) model->unk_id_ = model->TokenToId(model->unk_token_);
  static std::atomic<uint64_t> next_key{1};
  model->cache_key_ = next_key.fetch_add(1);
  return model;
}

absl::Status BpeModel::Tokenize(absl::string_view word, std::vector<int32_t>& ids,
                                Scratch& scratch) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return absl::OkStatus();
    }
  }
  if (word.size() > kCacheMaxWord) return MergeWord(word, ids, scratch);
  thread_local absl::flat_hash_map<uint64_t, WordCache> caches;
  WordCache& cache = caches[cache_key_];
  if (auto it = cache.find(word); it != cache.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return absl::OkStatus();
  }
  const size_t first = ids.size();
  ABCD_RETURN_IF_ERROR(MergeWord(word, ids, scratch));
  if (cache.size() < kCacheEntries) {
    cache.emplace(std::string(word), std::vector<int32_t>(ids.begin() + first, ids.end()));
  }
  return absl::OkStatus();
}

absl::Status BpeModel::MergeWord(absl::string_view word, std::vector<int32_t>& ids,
                                 Scratch& scratch) const {
  using Symbol = Scratch::Symbol;
  using Merge = Scratch::Merge;
  // The characters as symbols (Hugging Face's merge_word), then merge_all.
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  symbols.reserve(word.size());
  const auto add = [&](int32_t id) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, false});
    if (index > 0) symbols[index - 1].next = index;
  };
  int32_t pending_unk = -1;  // an unknown run not yet added (fuse_unk joins consecutive ones)
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    NextCodePoint(word, &pos);
    const absl::string_view ch = word.substr(begin, pos - begin);
    if (const uint8_t first_byte = static_cast<uint8_t>(ch[0]); first_byte < 0x80) {
      if (const int32_t id = ascii_ids_[first_byte]; id >= 0) {  // the table
        if (pending_unk >= 0) add(pending_unk);
        pending_unk = -1;
        add(id);
        continue;
      }
    } else if (auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk >= 0) add(pending_unk);
      pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all &= byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // (As Hugging Face does, a pending unknown run is added after these.)
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_token_.empty()) continue;  // no unk_token: the character is dropped
    if (unk_id_ < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: model.unk_token \"", unk_token_, "\" is not in the vocab"));
    }
    if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
    pending_unk = unk_id_;
  }
  if (pending_unk >= 0) add(pending_unk);

  // A priority queue (as std::priority_queue keeps one) in the scratch's vector.
  std::vector<Merge>& queue = scratch.queue;
  queue.clear();
  const auto push = [&queue](const Merge& merge) {
    queue.push_back(merge);
    std::push_heap(queue.begin(), queue.end());
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    auto it = merges_.find(PairKey(symbols[i].id, symbols[i + 1].id));
    if (it != merges_.end()) {
      push({it->second.first, static_cast<int32_t>(i), it->second.second, symbols[i].id,
            symbols[i + 1].id});
    }
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end());
    const Merge top = queue.back();
    queue.pop_back();
    Symbol& s = symbols[top.pos];
    if (s.removed || s.next < 0) continue;
    const int32_t right = s.next;
    // A stale entry is skipped as Hugging Face does: when the pair there now does not merge
    // into the same id. An unchanged pair needs no look-up.
    if (s.id != top.left || symbols[right].id != top.right) {
      auto it = merges_.find(PairKey(s.id, symbols[right].id));
      if (it == merges_.end() || it->second.second != top.new_id) continue;
    }
    s.id = top.new_id;
    symbols[right].removed = true;
    s.next = symbols[right].next;
    if (s.next >= 0) symbols[s.next].prev = top.pos;
    if (s.prev >= 0) {
      auto p = merges_.find(PairKey(symbols[s.prev].id, s.id));
      if (p != merges_.end()) {
        push({p->second.first, s.prev, p->second.second, symbols[s.prev].id, s.id});
      }
    }
    if (s.next >= 0) {
      auto n = merges_.find(PairKey(s.id, symbols[s.next].id));
      if (n != merges_.end()) {
        push({n->second.first, top.pos, n->second.second, s.id, symbols[s.next].id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (!s.removed) ids.push_back(s.id);
  }
  return absl::OkStatus();
}

}  // namespace abcd::hf
