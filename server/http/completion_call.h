// One completion or translation being answered over HTTP: its executor requests, their event
// channels and the response (one JSON body, or SSE chunks for a stream). HttpService parses and
// admits the request, enqueues each part, then calls Begin; the call answers, counts its
// outcome and gives back its in-flight place (CallOwner::Release) exactly once, when it
// settles: answered, the client gone or the server stopping.
//
// Thread-safety: every member function runs on the connection's strand (Exchange); the event
// channels' listeners only Dispatch to it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/scheduler/executor.h"
#include "nlohmann/json.hpp"
#include "server/core/session_ops.h"
#include "server/http/completion_format.h"
#include "server/http/event_channel.h"
#include "server/http/http_server.h"

namespace abcd::http {

// What a call needs of the service that started it (HttpService's implementation). Called on
// the call's strand.
class CallOwner {
 public:
  virtual ~CallOwner() = default;
  // Counts `status` under `kind` (abcd_requests_total) and answers it as an error.
  virtual void Fail(Exchange& exchange, absl::string_view kind, const absl::Status& status) = 0;
  // Counts "ok" under `kind` and answers 200 with `body`.
  virtual void Reply(Exchange& exchange, absl::string_view kind, const nlohmann::json& body) = 0;
  virtual void Count(absl::string_view kind, absl::string_view label) = 0;
  // Gives back the in-flight place the call was admitted with.
  virtual void Release() = 0;
  // A fresh response id ("cmpl-" + 16 hex digits).
  virtual std::string NewId(absl::string_view prefix) = 0;
  // Sessions (null: none); a completion on a session commits its state through it.
  virtual const SessionOps* sessions() const = 0;
};

// How a call writes its choices, straight from the engine's text: the legacy completion's shape
// (this class: {"index", "text", "finish_reason", "logprobs", "abcd"}) or chat's (ChatWriter,
// chat_route.h). One per call, used on its strand (a stream's writer may keep state per choice).
class ChoiceWriter {
 public:
  virtual ~ChoiceWriter() = default;
  // The body's or chunk's "object".
  virtual absl::string_view Object(bool stream) const;
  // The response id's prefix.
  virtual absl::string_view IdPrefix() const { return "cmpl-"; }
  // A body's choice: its whole text, its logprobs (ChoiceLogprobs::Take's object; null without)
  // and why it ended.
  virtual nlohmann::json BodyChoice(int index, std::string text, nlohmann::json logprobs,
                                    FinishReason reason);
  // A stream chunk's choice: its new text and the logprobs of its tokens; `finish` is set on the
  // choice's last chunk only.
  virtual nlohmann::json ChunkChoice(int index, std::string text, nlohmann::json logprobs,
                                     const FinishReason* finish);
};

class CompletionCall : public std::enable_shared_from_this<CompletionCall> {
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

  // `kind` ("completions", "chat" or "translate") must outlive the call (a literal).
  CompletionCall(CallOwner& owner, std::shared_ptr<Exchange> exchange, Executor& executor,
                 absl::string_view kind, size_t parts)
      : owner_(owner),
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
  std::unique_ptr<ChoiceWriter> writer = std::make_unique<ChoiceWriter>();

  // After every part was enqueued: starts listening (and the stream's head).
  void Begin();
  // Enqueue failed for a part: cancels the parts before it and answers the error.
  void FailEnqueue(absl::Status status);

 private:
  void CancelPending();
  void Settle();
  // The final OK event of a session's request: saves its state (on this I/O thread; a store
  // in an outage fails fast). OK when there is no session.
  absl::Status CommitSession(GenerationEvent& event);
  // An event's new text for its choice (the echoed prompt first, on the first event); its
  // tokens' logprobs are added to the choice's.
  std::string Absorb(GenerationEvent& event);
  nlohmann::json TakeLogprobs(size_t index);
  void Pump();
  // A chunk around `chunk_choices` (the writer's); "usage": null on every chunk with include_usage
  // (OpenAI's shape).
  nlohmann::json StreamChunk(nlohmann::json chunk_choices);
  // A chunk with the choice's text and the logprobs of its tokens since the last chunk.
  nlohmann::json TextChunk(std::string text, int index, const FinishReason* finish = nullptr);
  void SendEvent(const std::string& payload);
  void EndStream(absl::string_view label);
  // Streams one event. Text is held back per choice until it completes a UTF-8 character. A
  // choice's last event sends its finish_reason (and abcd.finish_reason); with include_usage
  // the request's last one is followed by a chunk with "choices": [] and the usage, as
  // OpenAI's. A failed session commit is an error event before [DONE].
  void StreamEvent(GenerationEvent event);
  void FlushPending();
  void Aborted(Abort kind);
  void Answer();

  CallOwner& owner_;
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

}  // namespace abcd::http
