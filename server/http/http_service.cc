#include "server/http/http_service.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/core/session_ops.h"
#include "server/http/admin_service.h"
#include "server/http/chat_route.h"
#include "server/http/completion_call.h"
#include "server/http/completion_format.h"
#include "server/http/event_channel.h"
#include "server/http/http_errors.h"
#include "server/http/http_server.h"
#include "server/http/render_queue.h"
#include "server/http/request_parser.h"
#include "server/http/route_answer.h"
#include "server/http/sessions_route.h"
#include "server/http/tokenize_route.h"

namespace abcd::http {
namespace {

using nlohmann::json;

// Chat renders (and /tokenize bodies) waiting for a RenderQueue worker; beyond it: 429.
constexpr size_t kRenderQueueCapacity = 64;

absl::string_view KindOfPath(absl::string_view path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/translate") return "translate";
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) return "list_models";
  if (path == "/v1/sessions" || absl::StartsWith(path, "/v1/sessions/")) return "sessions";
  if (path == "/tokenize" || path == "/detokenize") return "tokenize";
  return "";
}

// The transport's limits from the service's options.
ServerLimits TransportLimits(const HttpOptions& options) {
  ServerLimits limits;
  limits.io_threads = options.thread_count;
  limits.max_connections = options.max_connections;
  limits.max_line_bytes = options.max_line_bytes;
  limits.max_header_bytes = options.max_header_bytes;
  limits.max_body_bytes = options.max_body_bytes;
  limits.large_body_path = "/v1/sessions";  // POST: an imported session's blob
  limits.large_body_bytes = static_cast<size_t>(std::max<int64_t>(
      options.sessions == nullptr ? 0 : options.sessions->max_session_bytes(), 0));
  limits.header_timeout = options.header_timeout;
  limits.body_timeout = options.body_timeout;
  limits.idle_timeout = options.idle_timeout;
  limits.write_timeout = options.write_timeout;
  limits.body_budget = options.body_budget;
  return limits;
}

}  // namespace

class HttpService::Impl final : public CallOwner {
 public:
  Impl(ServedModels& models, HttpHooks hooks, HttpOptions options)
      : models_(models), hooks_(std::move(hooks)), options_(options) {
    limits_.max_tokens_limit = options_.max_tokens_limit;
    limits_.max_batch_texts = options_.max_batch_texts;
    limits_.max_choices = options_.max_choices;
    limits_.max_prompt_tokens = options_.max_prompt_tokens;
    std::random_device random;
    id_seed_ = (uint64_t{random()} << 32) ^ random();
    created_ = absl::ToUnixSeconds(absl::Now());
    server_ = std::make_unique<HttpServer>(
        TransportLimits(options_),
        [this](ServerRequest request, std::shared_ptr<Exchange> exchange) {
          Handle(std::move(request), std::move(exchange));
        },
        [this](absl::string_view target, int status) { Refused(target, status); });
    // Half as many render workers as I/O threads (at least one): a render near its work budget
    // takes seconds of CPU, and the I/O threads must keep a core to answer everything else.
    renders_ =
        std::make_unique<RenderQueue>(std::max(1, options_.thread_count / 2), kRenderQueueCapacity);
  }

  // Before the server stops: running renders end at their next poll (their clients get the
  // cancellation), queued ones are dropped and the workers joined, so no job outlives the
  // server's io_context (a job holds its exchange, whose strand belongs to that context).
  void StopRenders() {
    stopping_.store(true);
    renders_->Stop();
  }

  HttpServer& server() { return *server_; }

 private:
  void Handle(ServerRequest request, std::shared_ptr<Exchange> exchange);
  // Chat completions and /tokenize (which may render a chat template) are prepared on
  // renders_, off the I/O thread, then continue on the exchange's strand.
  void PrepareOffThread(ServerRequest request, std::shared_ptr<Exchange> exchange,
                        absl::string_view kind);
  void Refused(absl::string_view target, int status);

  // CallOwner:
  void Count(absl::string_view kind, absl::string_view label) override {
    if (hooks_.count_request) hooks_.count_request(kind, label);
  }
  // Counted before the client can see it.
  void Send(Exchange& exchange, absl::string_view kind, RouteAnswer answer) {
    if (!kind.empty() && !answer.label.empty()) Count(kind, answer.label);
    exchange.Reply(std::move(answer.response));
  }
  void Fail(Exchange& exchange, absl::string_view kind, const absl::Status& status) override {
    Send(exchange, kind, StatusAnswer(status));
  }
  void Reply(Exchange& exchange, absl::string_view kind, const json& body) override {
    Send(exchange, kind, JsonAnswer(body));
  }

  std::string NewId(absl::string_view prefix) override {
    const uint64_t n = next_id_.fetch_add(1) + 1;
    return absl::StrCat(prefix,
                        absl::Hex(id_seed_ ^ (n * 0x9E3779B97F4A7C15ull), absl::kZeroPad16));
  }

  // Takes one of the max_inflight places; false (and 429 sent, counted) when none is free.
  bool Admit(Exchange& exchange, absl::string_view kind);
  void Release() override { inflight_.fetch_sub(1); }
  const SessionOps* sessions() const override { return options_.sessions; }

  void Completions(const ServerRequest& request, std::shared_ptr<Exchange> exchange);
  // A parsed completion on its resolved model (kind "completions" or "chat"; `writer` writes
  // its answer).
  void StartCompletion(CompletionRequest request, const ServedModel& model,
                       std::shared_ptr<Exchange> exchange, absl::string_view kind,
                       std::unique_ptr<ChoiceWriter> writer);
  void Translate(const ServerRequest& request, std::shared_ptr<Exchange> exchange);
  json ModelObject(const ServedModel& model) const;

  ServedModels& models_;
  const HttpHooks hooks_;
  const HttpOptions options_;
  ParseLimits limits_;
  std::atomic<int> inflight_{0};
  std::atomic<bool> stopping_{false};  // Stop() began: renders are cancelled
  std::atomic<uint64_t> next_id_{0};
  uint64_t id_seed_ = 0;
  int64_t created_ = 0;
  std::unique_ptr<HttpServer> server_;  // stopped and destroyed before the rest but renders_
  // Workers that render chat templates: destroyed (joined) first.
  std::unique_ptr<RenderQueue> renders_;
};

void HttpService::Impl::Handle(ServerRequest request, std::shared_ptr<Exchange> exchange) {
  const std::string& path = request.path;
  if (KindOfPath(path) == "sessions") {  // the store is called on this I/O thread
    return Send(*exchange, "sessions", AnswerSessions(options_.sessions, request));
  }
  const absl::string_view kind = KindOfPath(path);
  std::string allowed = "GET";
  if (path == "/v1/completions" || path == "/v1/translate" || kind == "tokenize" ||
      kind == "chat") {
    allowed = "POST";
  }
  const bool model_path =
      absl::StartsWith(path, "/v1/models/") && path.size() > 11 && path.find('/', 11) == path.npos;
  const bool known = !kind.empty() || path == "/healthz" || path == "/readyz" || path == "/metrics";
  if (!known || (kind == "list_models" && path != "/v1/models" && !model_path)) {
    ServerResponse response = JsonResponse(
        404,
        ErrorBody(absl::StrCat("no route for ", Truncated(request.method), " ", Truncated(path)),
                  "not_found_error", ""));
    return exchange->Reply(std::move(response));
  }
  if (request.method != allowed) {
    ServerResponse response =
        JsonResponse(405, ErrorBody(absl::StrCat(Truncated(request.method), " is not allowed on ",
                                                 path, "; use ", allowed),
                                    "invalid_request_error", ""));
    response.headers.emplace_back("Allow", allowed);
    if (!kind.empty()) Count(kind, "invalid_argument");
    return exchange->Reply(std::move(response));
  }
  if (auto probe = ProbeResponse(path, models_, hooks_.render_metrics)) {
    return exchange->Reply(*std::move(probe));
  }
  if (path == "/v1/completions") return Completions(request, std::move(exchange));
  if (path == "/v1/translate") return Translate(request, std::move(exchange));
  if (kind == "chat" || path == "/tokenize") {
    return PrepareOffThread(std::move(request), std::move(exchange), kind);
  }
  if (kind == "tokenize") {
    absl::StatusOr<json> answer = AnswerDetokenize(models_, request.body, limits_);
    if (!answer.ok()) return Fail(*exchange, kind, answer.status());
    return Reply(*exchange, kind, *answer);
  }
  if (path == "/v1/models") {
    json data = json::array();
    for (const ServedModel* model : models_.All()) data.push_back(ModelObject(*model));
    return Reply(*exchange, kind, {{"object", "list"}, {"data", std::move(data)}});
  }
  const std::string name = path.substr(11);
  const ServedModel* model = models_.FindByName(name);
  if (model == nullptr) {
    absl::Status status =
        absl::NotFoundError(absl::StrCat("model '", Truncated(name), "' is not served"));
    status.SetPayload(kErrorCodePayload, absl::Cord("model_not_found"));
    return Fail(*exchange, kind, status);
  }
  Reply(*exchange, kind, ModelObject(*model));
}

void HttpService::Impl::PrepareOffThread(ServerRequest request, std::shared_ptr<Exchange> exchange,
                                         absl::string_view kind) {
  // `settled` is read and written on the exchange's strand only; `cancelled` by the worker too.
  struct Pending {
    std::atomic<bool> cancelled{false};
    bool settled = false;
  };
  auto pending = std::make_shared<Pending>();
  exchange->OnAbort([this, pending, raw = exchange.get(), kind](Abort abort) {
    pending->cancelled.store(true);
    if (pending->settled) return;
    pending->settled = true;
    if (abort == Abort::kClientGone) return Count(kind, "cancelled");
    Fail(*raw, kind, absl::UnavailableError("the server is shutting down"));
  });
  auto job = [this, pending, exchange, kind, body = std::move(request.body)] {
    const std::function<bool()> cancelled = [this, pending] {
      return pending->cancelled.load() || stopping_.load();
    };
    if (cancelled()) return;  // the client left while the job waited
    if (kind == "chat") {
      auto chat = std::make_shared<absl::StatusOr<PreparedChat>>(
          PrepareChat(models_, body, limits_, cancelled));
      exchange->Dispatch([this, pending, exchange, kind, chat] {
        if (pending->settled) return;
        pending->settled = true;
        if (!chat->ok()) return Fail(*exchange, kind, chat->status());
        PreparedChat& prepared = **chat;
        StartCompletion(std::move(prepared.request), *prepared.model, exchange, kind,
                        std::move(prepared.writer));
      });
      return;
    }
    auto answer = std::make_shared<absl::StatusOr<json>>(
        AnswerTokenize(models_, body, options_.max_prompt_tokens, cancelled));
    exchange->Dispatch([this, pending, exchange, kind, answer] {
      if (pending->settled) return;
      pending->settled = true;
      if (!answer->ok()) return Fail(*exchange, kind, answer->status());
      Reply(*exchange, kind, **answer);
    });
  };
  if (!renders_->Submit(std::move(job))) {
    pending->settled = true;
    // Refused by a stopped queue (the server drains) or a full one.
    Fail(*exchange, kind,
         stopping_.load()
             ? absl::UnavailableError("the server is draining; retry on another replica")
             : absl::ResourceExhaustedError(
                   absl::StrCat("overloaded: ", kRenderQueueCapacity,
                                " chat renders are already waiting on this server; retry later")));
  }
}

void HttpService::Impl::Refused(absl::string_view target, int status) {
  // Refusals before a request could be read (the connection cap, broken or slow headers)
  // have no path: they count as kind "other", so abcd_requests_total sees every one.
  const absl::string_view path = target.substr(0, target.find('?'));
  absl::string_view kind = KindOfPath(path);
  if (kind.empty()) kind = "other";
  const absl::string_view label = status == 503   ? "resource_exhausted"
                                  : status == 408 ? "deadline_exceeded"
                                                  : "invalid_argument";
  Count(kind, label);
}

bool HttpService::Impl::Admit(Exchange& exchange, absl::string_view kind) {
  if (inflight_.fetch_add(1) < options_.max_inflight) return true;
  inflight_.fetch_sub(1);
  Fail(exchange, kind,
       absl::ResourceExhaustedError(absl::StrCat("overloaded: ", options_.max_inflight,
                                                 " requests are already being answered by this "
                                                 "server; retry later")));
  return false;
}

void HttpService::Impl::Completions(const ServerRequest& http_request,
                                    std::shared_ptr<Exchange> exchange) {
  constexpr absl::string_view kKind = "completions";
  absl::StatusOr<CompletionRequest> request = ParseCompletionRequest(http_request.body, limits_);
  if (!request.ok()) return Fail(*exchange, kKind, request.status());
  if (!request->session_id.empty()) {
    const ServedModel* named = models_.FindByName(request->model);
    if (named != nullptr && named->kind != ModelKind::kLanguageModel) {
      return Fail(*exchange, kKind, SessionsNeedDecoderOnly());
    }
  }
  absl::StatusOr<const ServedModel*> model =
      models_.Resolve(request->model, ModelKind::kLanguageModel);
  if (!model.ok()) return Fail(*exchange, kKind, model.status());
  StartCompletion(*std::move(request), **model, std::move(exchange), kKind,
                  std::make_unique<ChoiceWriter>());
}

void HttpService::Impl::StartCompletion(CompletionRequest parsed, const ServedModel& model,
                                        std::shared_ptr<Exchange> exchange, absl::string_view kKind,
                                        std::unique_ptr<ChoiceWriter> writer) {
  CompletionRequest* request = &parsed;
  if (!Admit(*exchange, kKind)) return;
  Executor& executor = *model.executor;

  auto call = std::make_shared<CompletionCall>(*this, exchange, executor, kKind, 1);
  call->stream = request->stream;
  call->choices = request->generation.n;
  call->model = model.name;
  call->writer = std::move(writer);
  call->response_id = NewId(call->writer->IdPrefix());
  call->created = absl::ToUnixSeconds(absl::Now());
  call->echo = request->echo;
  call->want_logprobs = request->generation.logprobs >= 0;
  call->include_usage = request->include_usage;
  call->token_texts = TokenTexts(model.tokenizer.get());
  // The echoed text: the prompt as sent, or its ids decoded (after Enqueue checked them).
  call->echo_text = request->generation.prompt;
  std::vector<int32_t> echo_ids;
  if (request->echo) echo_ids = request->generation.prompt_token_ids;
  if (!request->session_id.empty()) {
    // The store is called on this I/O thread; in an outage it fails fast (its breaker).
    absl::StatusOr<std::optional<SessionLease>> lease =
        options_.sessions == nullptr
            ? absl::UnavailableError("sessions are not enabled on this server")
            : options_.sessions->Open(request->session_id, model, &request->generation);
    if (!lease.ok()) return call->FailEnqueue(WithParam(lease.status(), "session_id"));
    call->lease = *std::move(lease);
    call->session_id = call->lease->id();
  }
  CompletionCall::Part& part = call->parts()[0];
  absl::StatusOr<RequestId> id =
      executor.Enqueue(std::move(request->generation), EventChannel::Callback(part.channel));
  if (!id.ok()) {
    // The engine names the token ids it was given: a completion's "prompt", a chat's messages.
    absl::Status status = RenameField(id.status(), "prompt_token_ids",
                                      kKind == "chat" ? kRenderedMessages : "prompt");
    if (kKind == "chat") status = RenameField(status, "prompt", kRenderedMessages);
    return call->FailEnqueue(status);
  }
  part.id = *id;
  part.enqueued = true;
  if (!echo_ids.empty() && model.tokenizer != nullptr) {
    absl::StatusOr<std::string> text = model.tokenizer->Decode(echo_ids);
    if (text.ok()) call->echo_text = *std::move(text);
  }
  call->Begin();
}

void HttpService::Impl::Translate(const ServerRequest& http_request,
                                  std::shared_ptr<Exchange> exchange) {
  constexpr absl::string_view kKind = "translate";
  absl::StatusOr<TranslateRequest> request = ParseTranslateRequest(http_request.body, limits_);
  if (!request.ok()) return Fail(*exchange, kKind, request.status());
  absl::StatusOr<const ServedModel*> model =
      models_.Resolve(request->model, ModelKind::kTranslation);
  if (!model.ok()) return Fail(*exchange, kKind, model.status());
  if (!Admit(*exchange, kKind)) return;
  Executor& executor = *(*model)->executor;

  // Every text is queued before any is awaited, so the batch decodes together.
  const size_t n = request->texts.size();
  auto call = std::make_shared<CompletionCall>(*this, exchange, executor, kKind, n);
  call->batch = request->batch;
  call->model = (*model)->name;
  // One batch: the Executor checks the texts' total (--max_batch_source_tokens) and accepts all
  // or none; its errors name the text ("texts[3]: ...").
  std::vector<GenerationRequest> generations(n);
  std::vector<EventCallback> callbacks(n);
  for (size_t i = 0; i < n; ++i) {
    GenerationRequest& generation = generations[i];
    generation.source = std::move(request->texts[i]);
    generation.max_tokens = request->max_tokens;
    generation.beam_size = request->beam_size;
    generation.sampling.temperature = 0.0f;  // greedy / beam search, deterministic
    callbacks[i] = EventChannel::Callback(call->parts()[i].channel);
  }
  absl::StatusOr<std::vector<RequestId>> ids =
      executor.EnqueueBatch(std::move(generations), std::move(callbacks));
  if (!ids.ok()) {
    absl::Status status = ids.status();
    if (!request->batch && absl::StartsWith(status.message(), "texts[0]: ")) {
      status = absl::Status(status.code(), status.message().substr(10));
    }
    return call->FailEnqueue(status);
  }
  for (size_t i = 0; i < n; ++i) {
    call->parts()[i].id = (*ids)[i];
    call->parts()[i].enqueued = true;
  }
  call->Begin();
}

json HttpService::Impl::ModelObject(const ServedModel& model) const {
  return {{"id", model.name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "abcd"},
          {"kind", ModelKindName(model.kind)},
          {"state_bytes_per_sequence", model.state_bytes_per_sequence}};
}

HttpService::HttpService(ServedModels& models, HttpHooks hooks, HttpOptions options)
    : impl_(std::make_unique<Impl>(models, std::move(hooks), options)) {}

HttpService::~HttpService() { Stop(); }

absl::Status HttpService::Start(const std::string& host, int port) {
  if (started_ || stopped_) {
    return absl::FailedPreconditionError("HttpService::Start may be called once");
  }
  ABCD_RETURN_IF_ERROR(impl_->server().Start(host, port));
  started_ = true;
  port_ = impl_->server().port();
  return absl::OkStatus();
}

int64_t HttpService::evicted_connections() const { return impl_->server().evicted(); }

void HttpService::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  impl_->StopRenders();
  impl_->server().Stop();
}

}  // namespace abcd::http
