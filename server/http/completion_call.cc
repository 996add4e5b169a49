#include "server/http/completion_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/utf8.h"
#include "server/http/http_errors.h"
#include "server/http/route_answer.h"

namespace abcd::http {

using nlohmann::json;

absl::string_view ChoiceWriter::Object(bool /*stream*/) const { return "text_completion"; }

json ChoiceWriter::BodyChoice(int index, std::string text, json logprobs, FinishReason reason) {
  return {{"index", index},
          {"text", std::move(text)},
          {"finish_reason", OpenAiFinishReason(reason)},
          {"logprobs", std::move(logprobs)},
          {"abcd", {{"finish_reason", FinishReasonName(reason)}}}};
}

json ChoiceWriter::ChunkChoice(int index, std::string text, json logprobs,
                               const FinishReason* finish) {
  json choice = {{"index", index},
                 {"text", std::move(text)},
                 {"finish_reason", nullptr},
                 {"logprobs", std::move(logprobs)}};
  if (finish != nullptr) {
    choice["finish_reason"] = OpenAiFinishReason(*finish);
    choice["abcd"] = {{"finish_reason", FinishReasonName(*finish)}};
  }
  return choice;
}

void CompletionCall::Begin() {
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

void CompletionCall::FailEnqueue(absl::Status status) {
  CancelPending();
  Settle();
  owner_.Fail(*exchange_, kind_, status);
}

void CompletionCall::CancelPending() {
  for (Part& part : parts_) {
    if (part.enqueued && !part.done) executor_.Cancel(part.id);
  }
}

void CompletionCall::Settle() {
  if (settled_) return;
  settled_ = true;
  owner_.Release();
  for (Part& part : parts_) part.channel->ClearListener();
  lease.reset();  // not committed: the session stays as it was (unlocked on this I/O thread)
}

absl::Status CompletionCall::CommitSession(GenerationEvent& event) {
  if (!lease.has_value()) return absl::OkStatus();
  SessionLease held = *std::move(lease);
  lease.reset();
  return owner_.sessions()->Commit(std::move(held), std::move(event.saved_state));
}

std::string CompletionCall::Absorb(GenerationEvent& event) {
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

json CompletionCall::TakeLogprobs(size_t index) {
  if (!want_logprobs || index >= logprobs_.size()) return nullptr;
  return logprobs_[index].Take();
}

void CompletionCall::Pump() {
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
            return owner_.Fail(*exchange_, kind_, status);
          }
        }
      }
      if (settled_) return;
    }
  }
  if (!stream && std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.done; })) {
    Settle();
    Answer();
  }
}

json CompletionCall::StreamChunk(json chunk_choices) {
  json chunk = {{"id", response_id},
                {"object", writer->Object(/*stream=*/true)},
                {"created", created},
                {"model", model},
                {"choices", std::move(chunk_choices)}};
  if (!session_id.empty()) chunk["session_id"] = session_id;
  if (include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json CompletionCall::TextChunk(std::string text, int index, const FinishReason* finish) {
  return StreamChunk(
      json::array({writer->ChunkChoice(index, std::move(text), TakeLogprobs(index), finish)}));
}

void CompletionCall::SendEvent(const std::string& payload) {
  exchange_->StreamChunk(absl::StrCat("data: ", payload, "\n\n"));
}

void CompletionCall::EndStream(absl::string_view label) {
  owner_.Count(kind_, label);
  SendEvent("[DONE]");
  exchange_->EndStream();
}

void CompletionCall::StreamEvent(GenerationEvent event) {
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
      SendEvent(DumpJson(TextChunk(text, event.index)));
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
    std::string text = std::move(pending);
    pending.clear();
    SendEvent(DumpJson(TextChunk(std::move(text), event.index, &event.finish_reason)));
  }
  if (!event.finished) return;
  if (include_usage) {
    json chunk = StreamChunk(json::array());
    chunk["usage"] = Usage(event);
    SendEvent(DumpJson(chunk));
  }
  EndStream("ok");
}

void CompletionCall::FlushPending() {
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (!pending_[i].empty() || (want_logprobs && !logprobs_[i].empty())) {
      SendEvent(DumpJson(TextChunk(pending_[i], static_cast<int>(i))));
    }
    pending_[i].clear();
  }
}

void CompletionCall::Aborted(Abort kind) {
  if (settled_) return;
  CancelPending();
  Settle();
  if (kind == Abort::kClientGone) return owner_.Count(kind_, "cancelled");
  const absl::Status status = absl::UnavailableError("the server is shutting down");
  if (!stream) return owner_.Fail(*exchange_, kind_, status);
  FlushPending();
  SendEvent(ErrorBody(status));
  EndStream(MapStatusCode(status.code()).label);
}

void CompletionCall::Answer() {
  if (kind_ != "translate") {
    Part& part = parts_[0];
    const GenerationEvent& last = part.last;
    json choice_array = json::array();
    for (int i = 0; i < choices; ++i) {
      const FinishReason reason = choices > 1 ? part.choice_reasons[i] : last.finish_reason;
      choice_array.push_back(writer->BodyChoice(
          i, choices > 1 ? std::move(part.choice_texts[i]) : std::move(part.text),
          TakeLogprobs(static_cast<size_t>(i)), reason));
    }
    json body = {
        {"id", owner_.NewId(writer->IdPrefix())},      {"object", writer->Object(/*stream=*/false)},
        {"created", absl::ToUnixSeconds(absl::Now())}, {"model", model},
        {"choices", std::move(choice_array)},          {"usage", Usage(last)}};
    if (!session_id.empty()) body["session_id"] = session_id;
    return owner_.Reply(*exchange_, kind_, body);
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
  owner_.Reply(*exchange_, kind_, body);
}

}  // namespace abcd::http
