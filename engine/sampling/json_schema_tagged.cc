#include "engine/sampling/json_schema_tagged.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace abcd {
namespace {

// The node an alias (a union of one, what a $ref compiles to) stands for.
int Concrete(const std::vector<JsonNode>& nodes, int v) {
  for (int hops = 0; nodes[v].kind == JsonNode::Kind::kUnion && nodes[v].alternatives.size() == 1 &&
                     hops < static_cast<int>(nodes.size());
       ++hops) {
    v = nodes[v].alternatives[0];
  }
  return v;
}

// The index of required property `key` of object `object` whose value is enum/const values,
// or -1.
int TagIndex(const std::vector<JsonNode>& nodes, const JsonNode& object, const std::string& key) {
  for (size_t i = 0; i < object.keys.size(); ++i) {
    if (object.keys[i] != key) continue;
    const bool required = object.next_required[i] == static_cast<int>(i);
    const bool literals =
        nodes[Concrete(nodes, object.values[i])].kind == JsonNode::Kind::kLiterals;
    return required && literals ? static_cast<int>(i) : -1;
  }
  return -1;
}

// `object` with property `tag` moved first (the others keep their order).
JsonNode TagFirst(const JsonNode& object, int tag) {
  JsonNode copy = object;
  const size_t count = object.keys.size();
  std::vector<size_t> order = {static_cast<size_t>(tag)};
  for (size_t i = 0; i < count; ++i) {
    if (i != static_cast<size_t>(tag)) order.push_back(i);
  }
  copy.next_required.assign(count + 1, static_cast<int>(count));
  for (size_t j = 0; j < count; ++j) {
    copy.keys[j] = object.keys[order[j]];
    copy.values[j] = object.values[order[j]];
  }
  for (size_t j = count; j-- > 0;) {
    const bool required = object.next_required[order[j]] == static_cast<int>(order[j]);
    copy.next_required[j] = required ? static_cast<int>(j) : copy.next_required[j + 1];
  }
  copy.min_depth = 1;
  return copy;
}

// Merges union `v`'s object alternatives when a tag property tells them apart.
void MergeUnion(std::vector<JsonNode>* nodes, int v) {
  std::vector<size_t> objects;  // positions in the union's alternatives
  for (size_t i = 0; i < (*nodes)[v].alternatives.size(); ++i) {
    if ((*nodes)[Concrete(*nodes, (*nodes)[v].alternatives[i])].kind == JsonNode::Kind::kObject) {
      objects.push_back(i);
    }
  }
  if (objects.size() < 2) return;
  const auto object_at = [&](size_t position) -> const JsonNode& {
    return (*nodes)[Concrete(*nodes, (*nodes)[v].alternatives[objects[position]])];
  };
  // The first property of the first object alternative that tags them all apart.
  std::string key;
  std::vector<int> tags;  // per object alternative: the tag property's index
  for (const std::string& candidate : object_at(0).keys) {
    tags.clear();
    absl::flat_hash_set<std::string> seen;
    bool ok = true;
    for (size_t k = 0; k < objects.size() && ok; ++k) {
      const JsonNode& object = object_at(k);
      const int tag = TagIndex(*nodes, object, candidate);
      ok = tag >= 0;
      if (!ok) break;
      tags.push_back(tag);
      for (const std::string& text :
           (*nodes)[Concrete(*nodes, object.values[static_cast<size_t>(tag)])].literals) {
        ok = ok && seen.insert(text).second;
      }
    }
    if (ok) {
      key = candidate;
      break;
    }
  }
  if (key.empty()) return;
  std::vector<std::pair<std::string, int>> targets;  // tag literal -> the alternative's copy
  for (size_t k = 0; k < objects.size(); ++k) {
    JsonNode copy = TagFirst(object_at(k), tags[k]);
    const std::vector<std::string> literals = (*nodes)[Concrete(*nodes, copy.values[0])].literals;
    nodes->push_back(std::move(copy));
    const int id = static_cast<int>(nodes->size()) - 1;
    for (const std::string& text : literals) targets.emplace_back(text, id);
  }
  std::sort(targets.begin(), targets.end());
  JsonNode literals;
  literals.kind = JsonNode::Kind::kLiterals;
  JsonNode tagged;
  tagged.kind = JsonNode::Kind::kObject;
  tagged.keys = {key};
  tagged.next_required = {0, 1};
  for (const auto& [text, id] : targets) {
    literals.literals.push_back(text);
    tagged.tag_targets.push_back(id);
  }
  nodes->push_back(std::move(literals));
  tagged.values = {static_cast<int>(nodes->size()) - 1};
  nodes->push_back(std::move(tagged));
  const int merged = static_cast<int>(nodes->size()) - 1;
  std::vector<int> alternatives;
  for (size_t i = 0; i < (*nodes)[v].alternatives.size(); ++i) {
    if (i == objects[0]) {
      alternatives.push_back(merged);
    } else if (std::find(objects.begin(), objects.end(), i) == objects.end()) {
      alternatives.push_back((*nodes)[v].alternatives[i]);
    }
  }
  (*nodes)[v].alternatives = std::move(alternatives);
}

}  // namespace

void MergeTaggedUnions(std::vector<JsonNode>* nodes) {
  const int n = static_cast<int>(nodes->size());
  for (int v = 0; v < n; ++v) {
    if ((*nodes)[v].kind == JsonNode::Kind::kUnion && (*nodes)[v].alternatives.size() >= 2) {
      MergeUnion(nodes, v);
    }
  }
}

}  // namespace abcd
