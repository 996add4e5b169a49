// The models one server process serves, each with its tokenizer and its own Executor (engine
// thread and state pool), plus the process's readiness/draining flags. Built once at start-up,
// then read-only (the flags are atomics, the executors thread-safe), so frontends share it
// without locks.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

enum class ModelKind { kLanguageModel, kTranslation };

inline absl::string_view ModelKindName(ModelKind kind) {
  return kind == ModelKind::kTranslation ? "translation" : "lm";
}

struct ServedModel {
  std::string name;  // directory base name, e.g. "abc-lm-untrained"
  ModelKind kind = ModelKind::kLanguageModel;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Executor> executor;
  int64_t state_bytes_per_sequence = 0;  // fixed bytes; softmax layers add KV per token
};

class ServedModels {
 public:
  void Add(std::unique_ptr<ServedModel> model) { models_.push_back(std::move(model)); }

  // Empty name: the first model of that kind. Null when there is none.
  const ServedModel* Find(absl::string_view name, ModelKind kind) const {
    for (const auto& m : models_) {
      if (m->kind == kind && (name.empty() || m->name == name)) return m.get();
    }
    return nullptr;
  }
  // Any kind, by exact name.
  const ServedModel* FindByName(absl::string_view name) const {
    for (const auto& m : models_) {
      if (m->name == name) return m.get();
    }
    return nullptr;
  }
  std::vector<const ServedModel*> All() const {
    std::vector<const ServedModel*> all;
    for (const auto& m : models_) all.push_back(m.get());
    return all;
  }

  bool ready() const { return ready_.load() && !draining_.load() && BackendFailure().empty(); }
  // "<model>: <why>" for the first model whose backend failed for good (its Executor refuses
  // every request), else empty. The server is then not ready and its gRPC health NOT_SERVING,
  // so that an orchestrator restarts it.
  // True when no model has a running or waiting request (per the executors' latest stats).
  bool Idle() const {
    for (const auto& m : models_) {
      if (m->executor == nullptr) continue;
      const ExecutorStats stats = m->executor->LatestStats();
      if (stats.running_sequences > 0 || stats.waiting_requests > 0) return false;
    }
    return true;
  }
  std::string BackendFailure() const {
    for (const auto& m : models_) {
      if (m->executor == nullptr) continue;
      const std::string failure = m->executor->LatestStats().backend_failure;
      if (!failure.empty()) return m->name + ": " + failure;
    }
    return "";
  }
  bool draining() const { return draining_.load(); }
  void set_ready(bool ready) { ready_.store(ready); }
  void set_draining(bool draining) { draining_.store(draining); }

 private:
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
};

}  // namespace abcd
