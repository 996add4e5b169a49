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
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/core/session_ops.h"
#include "server/core/utf8.h"
#include "server/http/admin_service.h"
#include "server/http/chat_route.h"
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

}  // namespace

class HttpService::Impl {
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
    ServerLimits server_limits;
    server_limits.io_threads = options_.thread_count;
    server_limits.max_connections = options_.max_connections;
    server_limits.max_line_bytes = options_.max_line_bytes;
    server_limits.max_header_bytes = options_.max_header_bytes;
    server_limits.max_body_bytes = options_.max_body_bytes;
    server_limits.large_body_path = "/v1/sessions";  // POST: an imported session's blob
    server_limits.large_body_bytes = static_cast<size_t>(std::max<int64_t>(
        options_.sessions == nullptr ? 0 : options_.sessions->max_session_bytes(), 0));
    server_limits.header_timeout = options_.header_timeout;
    server_limits.body_timeout = options_.body_timeout;
    server_limits.idle_timeout = options_.idle_timeout;
    server_limits.write_timeout = options_.write_timeout;
    server_limits.body_budget = options_.body_budget;
    server_ = std::make_unique<HttpServer>(
        server_limits,
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
  class Call;
  friend class Call;

  void Handle(ServerRequest request, std::shared_ptr<Exchange> exchange);
  // Chat completions and /tokenize (which may render a chat template) are prepared on
  // renders_, off the I/O thread, then continue on the exchange's strand.
  void PrepareOffThread(ServerRequest request, std::shared_ptr<Exchange> exchange,
                        absl::string_view kind);
  void Refused(absl::string_view target, int status);

  void Count(absl::string_view kind, absl::string_view label) {
    if (hooks_.count_request) hooks_.count_request(kind, label);
  }
  // Counted before the client can see it.
  void Send(Exchange& exchange, absl::string_view kind, RouteAnswer answer) {
    if (!kind.empty() && !answer.label.empty()) Count(kind, answer.label);
    exchange.Reply(std::move(answer.response));
  }
  void Fail(Exchange& exchange, absl::string_view kind, const absl::Status& status) {
    Send(exchange, kind, StatusAnswer(status));
  }
  void Reply(Exchange& exchange, absl::string_view kind, const json& body) {
    Send(exchange, kind, JsonAnswer(body));
  }

  std::string NewId(absl::string_view prefix) {
    const uint64_t n = next_id_.fetch_add(1) + 1;
    return absl::StrCat(prefix,
                        absl::Hex(id_seed_ ^ (n * 0x9E3779B97F4A7C15ull), absl::kZeroPad16));
  }

  // Takes one of the max_inflight places; false (and 429 sent, counted) when none is free.
  bool Admit(Exchange& exchange, absl::string_view kind);
  void Release() { inflight_.fetch_sub(1); }

  void Completions(const ServerRequest& request, std::shared_ptr<Exchange> exchange);
  // A parsed completion (kind "completions" or "chat"; `reshape` rewrites every body/chunk).
  void StartCompletion(CompletionRequest request, std::shared_ptr<Exchange> exchange,
                       absl::string_view kind, std::function<void(json&)> reshape);
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

// One completion or translation being answered: its executor requests, their channels and the
// response. Every member function runs on the connection's strand. It holds an in-flight
// place until it settles (answered, client gone or server stopping), exactly once, and counts
// its outcome then.
class HttpService::Impl::Call : public std::enable_shared_from_this<Call> {
 public:
  struct Part {
    std::shared_ptr<EventChannel> channel = std::make_shared<EventChannel>();
    RequestId id = 0;
    bool enqueued = false;
    bool done = false;
    std::string text;
    GenerationEvent last;
    // Completions with n > 1: each choice's text and finish reason (choice 0 also in `text`).
    std::vector<std::string> choice_texts;
    std::vector<FinishReason> choice_reasons;
  };

  Call(Impl& service, std::shared_ptr<Exchange> exchange, Executor& executor,
       absl::string_view kind, size_t parts)
      : service_(service),
        exchange_(std::move(exchange)),
        executor_(executor),
        kind_(kind),
        parts_(parts) {}

  std::vector<Part>& parts() { return parts_; }
  bool stream = false;
  bool batch = false;
  int choices = 1;  // completions: n
  std::string model;
  std::string response_id;
  int64_t created = 0;
  // A completion on a session: its lease (committed on the final OK event, else dropped when
  // the call settles) and its id, echoed in every response and chunk.
  std::optional<SessionLease> lease;
  std::string session_id;
  // Completions: echo (echo_text comes before choice 0's first text, and with logprobs the
  // prompt's scores before its tokens'), logprobs, stream_options.include_usage.
  bool echo = false;
  std::string echo_text;
  bool want_logprobs = false;
  bool include_usage = false;
  TokenTexts token_texts{nullptr};
  std::function<void(json&)> reshape;  // chat: the completion shapes -> chat's (chat_route.h)
  std::string Out(json body) {
    if (reshape) reshape(body);
    return DumpJson(body);
  }

  // After every part was enqueued: starts listening (and the stream's head).
  void Begin() {
    pending_.assign(static_cast<size_t>(std::max(choices, 1)), "");
    choice_ended_.assign(pending_.size(), false);
    logprobs_.assign(pending_.size(), ChoiceLogprobs(&token_texts));
    for (Part& part : parts_) {
      part.choice_texts.assign(pending_.size(), "");
      part.choice_reasons.assign(pending_.size(), FinishReason::kLength);
    }
    exchange_->OnAbort([self = shared_from_this()](Abort kind) { self->Aborted(kind); });
    if (stream) {
      ServerResponse head;
      head.content_type = "text/event-stream";
      head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
      exchange_->StartStream(std::move(head));
    }
    for (Part& part : parts_) {
      part.channel->SetListener([exchange = exchange_, weak = weak_from_this()] {
        exchange->Dispatch([weak] {
          if (auto self = weak.lock()) self->Pump();
        });
      });
    }
  }

  // Enqueue failed for part `failed`: cancels the parts before it and answers the error.
  void FailEnqueue(absl::Status status) {
    CancelPending();
    Settle();
    service_.Fail(*exchange_, kind_, status);
  }

 private:
  void CancelPending() {
    for (Part& part : parts_) {
      if (part.enqueued && !part.done) executor_.Cancel(part.id);
    }
  }

  void Settle() {
    if (settled_) return;
    settled_ = true;
    service_.Release();
    for (Part& part : parts_) part.channel->ClearListener();
    lease.reset();  // not committed: the session stays as it was (unlocked on this I/O thread)
  }

  // The final OK event of a session's request: saves its state (on this I/O thread; a store
  // in an outage fails fast). OK when there is no session.
  absl::Status CommitSession(GenerationEvent& event) {
    if (!lease.has_value()) return absl::OkStatus();
    SessionLease held = *std::move(lease);
    lease.reset();
    return service_.options_.sessions->Commit(std::move(held), std::move(event.saved_state));
  }

  // An event's new text for its choice (the echoed prompt first, on the first event); its
  // tokens' logprobs are added to the choice's.
  std::string Absorb(GenerationEvent& event) {
    const size_t index = static_cast<size_t>(event.index);
    std::string text;
    if (echo && !echoed_) {
      echoed_ = true;
      text = std::move(echo_text);
      if (want_logprobs && !logprobs_.empty()) logprobs_[0].Add(event.prompt_logprobs);
    }
    text += event.text;
    if (want_logprobs && index < logprobs_.size()) {
      // The engine decodes the generated text after the prompt's tail (TextStream).
      if (!event.preceding_token_ids.empty()) logprobs_[index].Follow(event.preceding_token_ids);
      logprobs_[index].Add(event.logprobs);
    }
    return text;
  }
  json TakeLogprobs(size_t index) {
    if (!want_logprobs || index >= logprobs_.size()) return nullptr;
    return logprobs_[index].Take();
  }

  void Pump() {
    if (settled_) return;
    std::vector<GenerationEvent> events;
    for (size_t i = 0; i < parts_.size() && !settled_; ++i) {
      Part& part = parts_[i];
      if (part.done) continue;
      events.clear();
      part.channel->TakeAll(&events);
      for (GenerationEvent& event : events) {
        if (stream) {
          StreamEvent(std::move(event));
        } else {
          if (choices > 1) {
            const size_t index = static_cast<size_t>(event.index);
            if (index < part.choice_texts.size()) {
              part.choice_texts[index] += Absorb(event);
              if (event.choice_finished && !choice_ended_[index]) {
                choice_ended_[index] = true;
                part.choice_reasons[index] = event.finish_reason;
              }
            }
          } else {
            part.text += Absorb(event);
          }
          if (event.finished) {
            part.done = true;
            part.last = std::move(event);
            absl::Status status = part.last.status;
            if (status.ok()) status = CommitSession(part.last);
            if (!status.ok()) {
              CancelPending();
              Settle();
              return service_.Fail(*exchange_, kind_, status);
            }
          }
        }
        if (settled_) return;
      }
    }
    if (!stream &&
        std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.done; })) {
      Settle();
      Answer();
    }
  }

  // A chunk with the choice's text and the logprobs of its tokens since the last chunk;
  // "usage": null on every chunk with include_usage (OpenAI's shape).
  json StreamChunk(const std::string& text, int index = 0) {
    json chunk = {{"id", response_id},
                  {"object", "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({{{"index", index},
                                            {"text", text},
                                            {"finish_reason", nullptr},
                                            {"logprobs", TakeLogprobs(index)}}})}};
    if (!session_id.empty()) chunk["session_id"] = session_id;
    if (include_usage) chunk["usage"] = nullptr;
    return chunk;
  }
  void SendEvent(const std::string& payload) {
    exchange_->StreamChunk(absl::StrCat("data: ", payload, "\n\n"));
  }
  void EndStream(absl::string_view label) {
    service_.Count(kind_, label);
    SendEvent("[DONE]");
    exchange_->EndStream();
  }

  // Streams one event. Text is held back per choice until it completes a UTF-8 character. A
  // choice's last event sends its finish_reason (and abcd.finish_reason); with include_usage
  // the request's last one is followed by a chunk with "choices": [] and the usage, as
  // OpenAI's. A failed session commit is an error event before [DONE].
  void StreamEvent(GenerationEvent event) {
    const size_t index = static_cast<size_t>(event.index);
    if (index >= pending_.size()) return;  // the engine keeps index in [0, n)
    std::string& pending = pending_[index];
    pending += Absorb(event);
    // A choice ends once (the request's last event may repeat choice 0's end).
    const bool choice_end =
        (event.choice_finished || (choices == 1 && event.finished)) && !choice_ended_[index];
    if (choice_end) choice_ended_[index] = true;
    if (!event.finished && !choice_end) {
      const std::string text = TakeCompleteUtf8(pending);
      if (!text.empty() || !event.logprobs.empty()) {
        SendEvent(Out(StreamChunk(text, event.index)));
      }
      return;
    }
    if (event.finished) {
      parts_[0].done = true;
      if (event.status.ok()) event.status = CommitSession(event);
      Settle();
    }
    if (!event.status.ok()) {
      FlushPending();
      SendEvent(ErrorBody(event.status));
      return EndStream(MapStatusCode(event.status.code()).label);
    }
    if (choice_end) {
      json chunk = StreamChunk(pending, event.index);
      pending.clear();
      chunk["choices"][0]["finish_reason"] = OpenAiFinishReason(event.finish_reason);
      chunk["choices"][0]["abcd"] = {{"finish_reason", FinishReasonName(event.finish_reason)}};
      SendEvent(Out(chunk));
    }
    if (!event.finished) return;
    if (include_usage) {
      json chunk = StreamChunk("", 0);
      chunk["choices"] = json::array();
      chunk["usage"] = Usage(event);
      SendEvent(Out(chunk));
    }
    EndStream("ok");
  }

  void FlushPending() {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (!pending_[i].empty() || (want_logprobs && !logprobs_[i].empty())) {
        SendEvent(Out(StreamChunk(pending_[i], static_cast<int>(i))));
      }
      pending_[i].clear();
    }
  }

  void Aborted(Abort kind) {
    if (settled_) return;
    CancelPending();
    Settle();
    if (kind == Abort::kClientGone) return service_.Count(kind_, "cancelled");
    const absl::Status status = absl::UnavailableError("the server is shutting down");
    if (!stream) return service_.Fail(*exchange_, kind_, status);
    FlushPending();
    SendEvent(ErrorBody(status));
    EndStream(MapStatusCode(status.code()).label);
  }

  void Answer() {
    if (kind_ != "translate") {
      Part& part = parts_[0];
      const GenerationEvent& last = part.last;
      json choice_array = json::array();
      for (int i = 0; i < choices; ++i) {
        const FinishReason reason = choices > 1 ? part.choice_reasons[i] : last.finish_reason;
        choice_array.push_back(
            {{"index", i},
             {"text", choices > 1 ? std::move(part.choice_texts[i]) : std::move(part.text)},
             {"finish_reason", OpenAiFinishReason(reason)},
             {"logprobs", TakeLogprobs(static_cast<size_t>(i))},
             {"abcd", {{"finish_reason", FinishReasonName(reason)}}}});
      }
      json body = {{"id", service_.NewId("cmpl-")},
                   {"object", "text_completion"},
                   {"created", absl::ToUnixSeconds(absl::Now())},
                   {"model", model},
                   {"choices", std::move(choice_array)},
                   {"usage", Usage(last)}};
      if (!session_id.empty()) body["session_id"] = session_id;
      if (reshape) reshape(body);
      return service_.Reply(*exchange_, kind_, body);
    }
    json translations = json::array();
    int prompt_tokens = 0;
    int completion_tokens = 0;
    for (Part& part : parts_) {
      translations.push_back(std::move(part.text));
      prompt_tokens += part.last.prompt_tokens;
      completion_tokens += part.last.completion_tokens;
    }
    json body = {{"model", model}, {"usage", Usage(prompt_tokens, completion_tokens)}};
    if (batch) {
      body["translations"] = std::move(translations);
    } else {
      body["translation"] = std::move(translations[0]);
    }
    service_.Reply(*exchange_, kind_, body);
  }

  Impl& service_;
  const std::shared_ptr<Exchange> exchange_;
  Executor& executor_;
  const absl::string_view kind_;
  std::vector<Part> parts_;
  // Streamed text per choice, held back until it completes a UTF-8 character.
  std::vector<std::string> pending_;
  std::vector<bool> choice_ended_;        // per choice: its finish_reason was reported
  std::vector<ChoiceLogprobs> logprobs_;  // per choice: not yet sent (streaming) or answered
  bool echoed_ = false;
  bool settled_ = false;
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
        ChatShaper shaper(prepared.request.stream, prepared.logprobs, prepared.top_logprobs,
                          prepared.tool_calls);
        StartCompletion(std::move(prepared.request), exchange, kind, shaper);
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
    Fail(*exchange, kind,
         absl::ResourceExhaustedError(
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
  StartCompletion(*std::move(request), std::move(exchange), kKind, nullptr);
}

void HttpService::Impl::StartCompletion(CompletionRequest parsed,
                                        std::shared_ptr<Exchange> exchange, absl::string_view kKind,
                                        std::function<void(json&)> reshape) {
  CompletionRequest* request = &parsed;
  if (!request->session_id.empty()) {
    const ServedModel* named = models_.FindByName(request->model);
    if (named != nullptr && named->kind != ModelKind::kLanguageModel) {
      return Fail(*exchange, kKind, SessionsNeedDecoderOnly());
    }
  }
  absl::StatusOr<const ServedModel*> model =
      models_.Resolve(request->model, ModelKind::kLanguageModel);
  if (!model.ok()) return Fail(*exchange, kKind, model.status());
  if (!Admit(*exchange, kKind)) return;
  Executor& executor = *(*model)->executor;

  auto call = std::make_shared<Call>(*this, exchange, executor, kKind, 1);
  call->stream = request->stream;
  call->choices = request->generation.n;
  call->model = (*model)->name;
  call->response_id = NewId("cmpl-");
  call->created = absl::ToUnixSeconds(absl::Now());
  call->echo = request->echo;
  call->want_logprobs = request->generation.logprobs >= 0;
  call->include_usage = request->include_usage;
  call->token_texts = TokenTexts((*model)->tokenizer.get());
  call->reshape = std::move(reshape);
  // The echoed text: the prompt as sent, or its ids decoded (after Enqueue checked them).
  call->echo_text = request->generation.prompt;
  std::vector<int32_t> echo_ids;
  if (request->echo) echo_ids = request->generation.prompt_token_ids;
  if (!request->session_id.empty()) {
    // The store is called on this I/O thread; in an outage it fails fast (its breaker).
    absl::StatusOr<std::optional<SessionLease>> lease =
        options_.sessions == nullptr
            ? absl::UnavailableError("sessions are not enabled on this server")
            : options_.sessions->Open(request->session_id, **model, &request->generation);
    if (!lease.ok()) return call->FailEnqueue(lease.status());
    call->lease = *std::move(lease);
    call->session_id = call->lease->id();
  }
  Call::Part& part = call->parts()[0];
  absl::StatusOr<RequestId> id =
      executor.Enqueue(std::move(request->generation), EventChannel::Callback(part.channel));
  if (!id.ok()) return call->FailEnqueue(id.status());
  part.id = *id;
  part.enqueued = true;
  if (!echo_ids.empty() && (*model)->tokenizer != nullptr) {
    absl::StatusOr<std::string> text = (*model)->tokenizer->Decode(echo_ids);
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
  auto call = std::make_shared<Call>(*this, exchange, executor, kKind, n);
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
