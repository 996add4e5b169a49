// The models one server process serves, each with its tokenizer and its own Executor (engine
// thread and state pool), plus the process's readiness/draining flags. Built once at start-up,
// then read-only (the flags are atomics, the executors thread-safe), so frontends share it
// without locks. Resolve() is the one front door both protocols take to a model.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/core/utf8.h"

namespace abcd {
namespace chat {
class ChatTemplate;  // server/chat/chat_template.h
}  // namespace chat

enum class ModelKind { kLanguageModel, kTranslation };

inline absl::string_view ModelKindName(ModelKind kind) {
  return kind == ModelKind::kTranslation ? "translation" : "lm";
}

// A status payload naming OpenAI's error code: HTTP puts it in error.code ("model_not_found").
inline constexpr absl::string_view kErrorCodePayload = "type.abcd.dev/error_code";

inline std::optional<std::string> ErrorCode(const absl::Status& status) {
  const auto code = status.GetPayload(kErrorCodePayload);
  if (!code.has_value()) return std::nullopt;
  return std::string(*code);
}

struct ServedModel {
  std::string name;  // directory base name, e.g. "abc-lm-untrained"
  ModelKind kind = ModelKind::kLanguageModel;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Executor> executor;
  std::shared_ptr<const chat::ChatTemplate> chat_template;  // language models; may be null
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
  // The model a request of `kind` names, ready to take it; the same answer on gRPC and HTTP:
  //   empty name    the first model of `kind`; NOT_FOUND when none is served
  //   unknown name  NOT_FOUND "model 'NAME' is not served (lm models: a, b)", error code
  //                 model_not_found (HTTP 404, gRPC NOT_FOUND)
  //   other kind    INVALID_ARGUMENT "model 'NAME' is a translation model, not a lm model"
  //   not loaded    UNAVAILABLE; draining: UNAVAILABLE "the server is draining; retry on another
  //                 replica" (HTTP 503, gRPC UNAVAILABLE)
  absl::StatusOr<const ServedModel*> Resolve(absl::string_view name, ModelKind kind) const {
    const ServedModel* model = name.empty() ? Find("", kind) : FindByName(name);
    if (model == nullptr) {
      std::vector<absl::string_view> names;
      for (const auto& m : models_) {
        if (m->kind == kind) names.push_back(m->name);
      }
      absl::Status status = absl::NotFoundError(
          name.empty()
              ? absl::StrCat("model is required: no ", ModelKindName(kind), " model is served")
              : absl::StrCat(
                    "model '", TruncateForMessage(name), "' is not served (", ModelKindName(kind),
                    " models: ", names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
      status.SetPayload(kErrorCodePayload, absl::Cord("model_not_found"));
      return status;
    }
    if (model->kind != kind) {
      return absl::InvalidArgumentError(absl::StrCat("model '", TruncateForMessage(name), "' is a ",
                                                     ModelKindName(model->kind), " model, not a ",
                                                     ModelKindName(kind), " model"));
    }
    if (model->executor == nullptr) {
      return absl::UnavailableError(absl::StrCat("model '", model->name, "' is not loaded"));
    }
    if (draining()) {
      return absl::UnavailableError("the server is draining; retry on another replica");
    }
    return model;
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
