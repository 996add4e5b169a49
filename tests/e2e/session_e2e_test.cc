// Sessions, n-way sampling and the prefix cache end to end (issue 14) on the real abcd-server
// over gRPC and HTTP: a multi-turn session is token-identical to one fresh request on the whole
// history (greedy and seeded), only the new prompt is prefilled, a cancelled turn leaves the
// session as it was, a busy session is refused (ABORTED / 409), unknown ids are NOT_FOUND / 404,
// delete, export -> import -> continue, foreign and corrupt blobs refused, translation models
// refuse sessions, n choices equal n single requests with seed + i, and outputs are identical
// with the prefix cache on and off while its hit counter moves.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "engine/state/sequence_blob.h"
#include "tests/e2e/session_client.h"

namespace abcd {
namespace {

using testing::GrpcTurn;
using testing::HttpText;
using testing::HttpTurn;
using testing::Sampling;
using testing::SessionClient;
using testing::Tokens;

constexpr int kTurns = 4;

class SessionE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    client_ = new SessionClient({"--prefix_cache_mb", "64"});
    ASSERT_TRUE(client_->started()) << client_->server().Log();
  }
  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(client_, nullptr);
    ASSERT_TRUE(client_->started());
  }
  SessionClient& c() { return *client_; }

  // A gRPC conversation of kTurns turns on one session: each turn's tokens must equal a fresh
  // request whose prompt_token_ids are the history so far plus the turn's prompt.
  void CheckConversation(const Sampling& sampling) {
    std::string session = "new";
    std::vector<int32_t> history;
    for (int turn = 0; turn < kTurns; ++turn) {
      const std::vector<int32_t> prompt = Tokens(5 + turn, turn + 1);
      const GrpcTurn on_session = c().Generate(c().Request(prompt, sampling, session));
      ASSERT_TRUE(on_session.status.ok()) << on_session.status.error_message();
      ASSERT_FALSE(on_session.first_session_id().empty());
      EXPECT_EQ(on_session.first_session_id(), on_session.last_session_id());
      if (turn > 0) {
        EXPECT_EQ(on_session.first_session_id(), session);
        // Only the new prompt is prefilled: the history comes from the saved state.
        EXPECT_EQ(on_session.usage().prompt_tokens(), static_cast<int>(prompt.size()));
      }
      session = on_session.first_session_id();
      history.insert(history.end(), prompt.begin(), prompt.end());
      const GrpcTurn fresh = c().Generate(c().Request(history, sampling));
      ASSERT_TRUE(fresh.status.ok()) << fresh.status.error_message();
      EXPECT_EQ(on_session.tokens(), fresh.tokens()) << "turn " << turn;
      EXPECT_TRUE(fresh.first_session_id().empty());
      const std::vector<int32_t> generated = on_session.tokens();
      ASSERT_FALSE(generated.empty());
      history.insert(history.end(), generated.begin(), generated.end());
    }
    abcd::v1::GetSessionRequest get;
    get.set_session_id(session);
    abcd::v1::SessionInfo info;
    grpc::ClientContext context;
    ASSERT_TRUE(c().stub().GetSession(&context, get, &info).ok());
    EXPECT_EQ(info.session_id(), session);
    EXPECT_EQ(info.model(), "abc-lm-untrained");
    EXPECT_EQ(info.tokens(), static_cast<int64_t>(history.size()) + 1);  // + bos
    EXPECT_GT(info.bytes(), 0);
    EXPECT_GT(info.last_used_unix_ms(), 0);
  }

  static SessionClient* client_;
};

SessionClient* SessionE2eTest::client_ = nullptr;

TEST_F(SessionE2eTest, GrpcGreedyConversationEqualsFreshRequestOnHistory) {
  CheckConversation(Sampling{true, 0});
}

TEST_F(SessionE2eTest, GrpcSeededConversationEqualsFreshRequestOnHistory) {
  CheckConversation(Sampling{false, 1234});
}

// HTTP turns (streaming and not) carry the session id everywhere and produce the same text as
// the same conversation over gRPC, whose tokens are checked against fresh requests above.
TEST_F(SessionE2eTest, HttpConversationEqualsGrpcConversation) {
  for (const Sampling sampling : {Sampling{true, 0}, Sampling{false, 77}}) {
    std::string grpc_session = "new";
    std::string http_session = "new";
    std::vector<int32_t> history;
    for (int turn = 0; turn < kTurns; ++turn) {
      const std::vector<int32_t> prompt = Tokens(4 + turn, 10 + turn);
      const GrpcTurn reference = c().Generate(c().Request(prompt, sampling, grpc_session));
      ASSERT_TRUE(reference.status.ok()) << reference.status.error_message();
      grpc_session = reference.first_session_id();
      std::string reference_text;
      for (const auto& r : reference.responses) reference_text += r.text();

      nlohmann::json body = c().Body(prompt, sampling, http_session);
      body["stream"] = turn % 2 == 1;
      if (turn % 2 == 1) body["stream_options"] = {{"include_usage", true}};
      const HttpTurn http = c().Complete(body);
      ASSERT_EQ(http.status, 200) << http.body.dump();
      if (body["stream"].get<bool>()) {
        ASSERT_TRUE(http.done);
        ASSERT_FALSE(http.chunks.empty());
        for (const auto& chunk : http.chunks) {
          ASSERT_TRUE(chunk.contains("session_id")) << chunk.dump();
          EXPECT_EQ(chunk["session_id"], http.chunks.front()["session_id"]);
          if (http_session != "new") {
            EXPECT_EQ(chunk["session_id"], http_session);
          }
        }
        http_session = http.chunks.front()["session_id"];
        const auto& usage = http.chunks.back()["usage"];
        EXPECT_EQ(usage["prompt_tokens"], prompt.size());
        EXPECT_TRUE(usage["prompt_tokens_details"].contains("cached_tokens"));
      } else {
        ASSERT_TRUE(http.body.contains("session_id")) << http.body.dump();
        if (turn > 0) {
          EXPECT_EQ(http.body["session_id"], http_session);
          EXPECT_EQ(http.body["usage"]["prompt_tokens"], prompt.size());
        }
        http_session = http.body["session_id"];
      }
      EXPECT_EQ(HttpText(http), reference_text) << "turn " << turn;
      history.insert(history.end(), prompt.begin(), prompt.end());
      const std::vector<int32_t> generated = reference.tokens();
      history.insert(history.end(), generated.begin(), generated.end());
    }
    EXPECT_NE(http_session, grpc_session);
    auto meta = c().http().Get("/v1/sessions/" + http_session);
    ASSERT_TRUE(meta);
    ASSERT_EQ(meta->status, 200) << meta->body;
    const auto json = nlohmann::json::parse(meta->body);
    EXPECT_EQ(json["session_id"], http_session);
    EXPECT_EQ(json["model"], "abc-lm-untrained");
    EXPECT_EQ(json["tokens"], history.size() + 1);
    EXPECT_GT(json["bytes"].get<int64_t>(), 0);
    EXPECT_TRUE(absl::EndsWith(json["last_used"].get<std::string>(), "Z")) << json.dump();
  }
}

// Runs an HTTP streaming turn with ignore_eos and many tokens on `session` in a thread; the
// turn holds the session until Release() (the client then drops the connection).
class LongTurn {
 public:
  LongTurn(int http_port, const std::string& session) {
    thread_ = std::thread([this, http_port, session] {
      httplib::Client client("127.0.0.1", http_port);
      client.set_read_timeout(30, 0);
      const nlohmann::json body = {{"prompt", Tokens(3, 99)},
                                   {"max_tokens", 4000},
                                   {"ignore_eos", true},
                                   {"stream", true},
                                   {"session_id", session}};
      httplib::Request request;
      request.method = "POST";
      request.path = "/v1/completions";
      request.body = body.dump();
      request.set_header("Content-Type", "application/json");
      request.content_receiver = [this](const char*, size_t, uint64_t, uint64_t) {
        started_ = true;
        while (!release_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return false;  // drop the connection: the turn is cancelled
      };
      client.send(request);
      started_ = true;
    });
    for (int i = 0; i < 2000 && !started_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~LongTurn() { Release(); }
  bool started() const { return started_; }
  void Release() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> started_{false};
  std::atomic<bool> release_{false};
  std::thread thread_;
};

// Retries a gRPC turn while the session is still held by a cancelled one (its lease is
// dropped when the server notices the client gone, a few milliseconds later).
GrpcTurn TurnWhenFree(SessionClient& c, const abcd::v1::GenerateRequest& request) {
  GrpcTurn turn;
  for (int i = 0; i < 200; ++i) {
    turn = c.Generate(request);
    if (turn.status.error_code() != grpc::StatusCode::ABORTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return turn;
}

TEST_F(SessionE2eTest, BusySessionIsRefusedAndCancelledTurnLeavesItUnchanged) {
  const Sampling greedy{true, 0};
  const std::vector<int32_t> first = Tokens(6, 3);
  const GrpcTurn turn1 = c().Generate(c().Request(first, greedy, "new"));
  ASSERT_TRUE(turn1.status.ok()) << turn1.status.error_message();
  const std::string session = turn1.first_session_id();
  {
    LongTurn busy(c().server().http_port(), session);
    ASSERT_TRUE(busy.started());
    const GrpcTurn refused = c().Generate(c().Request(Tokens(3, 4), greedy, session));
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_NE(refused.status.error_message().find(session), std::string::npos)
        << refused.status.error_message();
    const HttpTurn http = c().Complete(c().Body(Tokens(3, 4), greedy, session));
    EXPECT_EQ(http.status, 409) << http.body.dump();
    EXPECT_NE(http.body.dump().find(session), std::string::npos) << http.body.dump();
    // Export and metadata need no lock.
    EXPECT_EQ(c().http().Get("/v1/sessions/" + session)->status, 200);
  }  // the long turn is cancelled: the session stays as turn 1 left it
  const std::vector<int32_t> second = Tokens(4, 5);
  const GrpcTurn turn2 = TurnWhenFree(c(), c().Request(second, greedy, session));
  ASSERT_TRUE(turn2.status.ok()) << turn2.status.error_message();
  std::vector<int32_t> history = first;
  const std::vector<int32_t> generated = turn1.tokens();
  history.insert(history.end(), generated.begin(), generated.end());
  history.insert(history.end(), second.begin(), second.end());
  const GrpcTurn fresh = c().Generate(c().Request(history, greedy));
  ASSERT_TRUE(fresh.status.ok());
  EXPECT_EQ(turn2.tokens(), fresh.tokens());
}

TEST_F(SessionE2eTest, UnknownMalformedAndDeletedIds) {
  const std::string unknown(32, 'a');
  const GrpcTurn missing = c().Generate(c().Request(Tokens(3, 1), Sampling{}, unknown));
  EXPECT_EQ(missing.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(c().Complete(c().Body(Tokens(3, 1), Sampling{}, unknown)).status, 404);
  EXPECT_EQ(c().http().Get("/v1/sessions/" + unknown)->status, 404);
  EXPECT_EQ(c().http().Get("/v1/sessions/" + unknown + "/state")->status, 404);
  EXPECT_EQ(c().http().Delete("/v1/sessions/" + unknown)->status, 404);

  const HttpTurn malformed = c().Complete(c().Body(Tokens(3, 1), Sampling{}, "XYZ"));
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(malformed.body["error"]["param"], "session_id") << malformed.body.dump();
  const GrpcTurn bad = c().Generate(c().Request(Tokens(3, 1), Sampling{}, "XYZ"));
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const GrpcTurn created = c().Generate(c().Request(Tokens(3, 2), Sampling{}, "new"));
  ASSERT_TRUE(created.status.ok());
  const std::string session = created.first_session_id();
  EXPECT_EQ(session.size(), 32u);
  auto deleted = c().http().Delete("/v1/sessions/" + session);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  EXPECT_EQ(c().http().Get("/v1/sessions/" + session)->status, 404);
  abcd::v1::DeleteSessionRequest again;
  again.set_session_id(session);
  abcd::v1::DeleteSessionResponse response;
  grpc::ClientContext context;
  EXPECT_EQ(c().stub().DeleteSession(&context, again, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(c().Generate(c().Request(Tokens(3, 1), Sampling{}, session)).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Counted: the session routes and rpcs under kind "sessions", misses by the store's metrics.
  EXPECT_GE(c().Metric("abcd_requests_total{kind=\"sessions\",status=\"not_found\"}"), 5);
  EXPECT_GE(c().Metric("abcd_requests_total{kind=\"sessions\",status=\"ok\"}"), 1);
  EXPECT_GE(c().Metric("abcd_requests_total{kind=\"completions\",status=\"not_found\"}"), 1);
  EXPECT_GE(c().Metric("abcd_session_misses_total"), 2);
}

TEST_F(SessionE2eTest, ExportImportContinueEqualsContinuingTheOriginal) {
  const Sampling seeded{false, 5};
  const GrpcTurn turn1 = c().Generate(c().Request(Tokens(7, 8), seeded, "new"));
  ASSERT_TRUE(turn1.status.ok()) << turn1.status.error_message();
  const std::string original = turn1.first_session_id();

  // gRPC export -> HTTP import, and HTTP export -> gRPC import.
  abcd::v1::ExportSessionRequest export_request;
  export_request.set_session_id(original);
  abcd::v1::SessionState state;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(c().stub().ExportSession(&context, export_request, &state).ok());
  }
  auto http_state = c().http().Get("/v1/sessions/" + original + "/state");
  ASSERT_TRUE(http_state);
  ASSERT_EQ(http_state->status, 200);
  EXPECT_EQ(http_state->get_header_value("Content-Type"), "application/octet-stream");
  EXPECT_EQ(http_state->body, state.state());

  auto imported_http = c().http().Post("/v1/sessions", state.state(), "application/octet-stream");
  ASSERT_TRUE(imported_http);
  ASSERT_EQ(imported_http->status, 200) << imported_http->body;
  const auto imported_json = nlohmann::json::parse(imported_http->body);
  const std::string copy_http = imported_json["session_id"];
  EXPECT_EQ(imported_json["model"], "abc-lm-untrained");
  EXPECT_EQ(imported_json["bytes"], state.state().size());
  abcd::v1::SessionInfo imported_grpc;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(c().stub().ImportSession(&context, state, &imported_grpc).ok());
  }
  const std::string copy_grpc = imported_grpc.session_id();
  EXPECT_NE(copy_http, original);
  EXPECT_NE(copy_grpc, copy_http);

  const std::vector<int32_t> next = Tokens(5, 9);
  const GrpcTurn continued = c().Generate(c().Request(next, seeded, original));
  const GrpcTurn from_http = c().Generate(c().Request(next, seeded, copy_http));
  const GrpcTurn from_grpc = c().Generate(c().Request(next, seeded, copy_grpc));
  ASSERT_TRUE(continued.status.ok() && from_http.status.ok() && from_grpc.status.ok());
  EXPECT_EQ(from_http.tokens(), continued.tokens());
  EXPECT_EQ(from_grpc.tokens(), continued.tokens());
  EXPECT_EQ(from_http.first_session_id(), copy_http);
}

TEST_F(SessionE2eTest, ForeignAndCorruptBlobsAreRefused) {
  const GrpcTurn turn = c().Generate(c().Request(Tokens(4, 11), Sampling{}, "new"));
  ASSERT_TRUE(turn.status.ok());
  auto exported = c().http().Get("/v1/sessions/" + turn.first_session_id() + "/state");
  ASSERT_TRUE(exported && exported->status == 200);
  absl::StatusOr<SequenceBlob> blob = DecodeSequenceBlob(exported->body);
  ASSERT_TRUE(blob.ok()) << blob.status();

  // A blob of another model (abc-lm, which this server does not serve).
  SessionClient other({}, testing::kTrainedLmDir);
  ASSERT_TRUE(other.started()) << other.server().Log();
  const GrpcTurn foreign_turn = other.Generate(other.Request(Tokens(4, 11), Sampling{}, "new"));
  ASSERT_TRUE(foreign_turn.status.ok()) << foreign_turn.status.error_message();
  auto foreign = other.http().Get("/v1/sessions/" + foreign_turn.first_session_id() + "/state");
  ASSERT_TRUE(foreign && foreign->status == 200);
  auto refused = c().http().Post("/v1/sessions", foreign->body, "application/octet-stream");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 412) << refused->body;
  EXPECT_NE(refused->body.find("'abc-lm'"), std::string::npos) << refused->body;
  EXPECT_NE(refused->body.find("abc-lm-untrained"), std::string::npos) << refused->body;
  // The same state claiming to be this server's model: its layout fingerprint still differs.
  absl::StatusOr<SequenceBlob> renamed = DecodeSequenceBlob(foreign->body);
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  renamed->model = "abc-lm-untrained";
  abcd::v1::SessionState state;
  state.set_state(EncodeSequenceBlob(*renamed));
  abcd::v1::SessionInfo info;
  {
    grpc::ClientContext context;
    const grpc::Status status = c().stub().ImportSession(&context, state, &info);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  }
  // The same over HTTP.
  EXPECT_EQ(c().http().Post("/v1/sessions", state.state(), "application/octet-stream")->status,
            412);
  // A blob whose header and state disagree is corrupt.
  SequenceBlob inconsistent = *blob;
  inconsistent.fingerprint ^= 1;
  state.set_state(EncodeSequenceBlob(inconsistent));
  {
    grpc::ClientContext context;
    EXPECT_EQ(c().stub().ImportSession(&context, state, &info).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  std::string corrupt = exported->body;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  auto bad = c().http().Post("/v1/sessions", corrupt, "application/octet-stream");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  state.set_state(corrupt);
  {
    grpc::ClientContext context;
    EXPECT_EQ(c().stub().ImportSession(&context, state, &info).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  auto empty = c().http().Post("/v1/sessions", "", "application/octet-stream");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 400);
}

TEST_F(SessionE2eTest, TranslationModelAndNWayRefuseSessions) {
  abcd::v1::GenerateRequest request = c().Request(Tokens(3, 1), Sampling{}, "new");
  request.set_model("abc-mt-untrained");
  const GrpcTurn grpc_turn = c().Generate(request);
  EXPECT_EQ(grpc_turn.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(grpc_turn.status.error_message().find("decoder-only"), std::string::npos);
  nlohmann::json body = c().Body(Tokens(3, 1), Sampling{}, "new");
  body["model"] = "abc-mt-untrained";
  const HttpTurn http = c().Complete(body);
  EXPECT_EQ(http.status, 400);
  EXPECT_EQ(http.body["error"]["param"], "session_id") << http.body.dump();

  const HttpTurn n_way = c().Complete(c().Body(Tokens(3, 1), Sampling{false, 1}, "new", 2));
  EXPECT_EQ(n_way.status, 400);
  EXPECT_EQ(n_way.body["error"]["param"], "n") << n_way.body.dump();
  EXPECT_EQ(
      c().Generate(c().Request(Tokens(3, 1), Sampling{false, 1}, "new", 2)).status.error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(SessionE2eTest, NChoicesEqualSingleRequestsWithSeedPlusIndex) {
  constexpr int kN = 3;
  const std::vector<int32_t> prompt = Tokens(6, 21);
  const GrpcTurn n_way = c().Generate(c().Request(prompt, Sampling{false, 40}, "", kN));
  ASSERT_TRUE(n_way.status.ok()) << n_way.status.error_message();
  nlohmann::json body = c().Body(prompt, Sampling{false, 40}, "", kN);
  const HttpTurn http = c().Complete(body);
  ASSERT_EQ(http.status, 200) << http.body.dump();
  ASSERT_EQ(http.body["choices"].size(), static_cast<size_t>(kN));
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const HttpTurn streamed = c().Complete(body);
  ASSERT_EQ(streamed.status, 200);
  ASSERT_TRUE(streamed.done);
  for (int i = 0; i < kN; ++i) {
    const GrpcTurn single = c().Generate(c().Request(prompt, Sampling{false, 40u + i}));
    ASSERT_TRUE(single.status.ok());
    EXPECT_EQ(n_way.tokens(i), single.tokens()) << "choice " << i;
    std::string single_text;
    for (const auto& r : single.responses) single_text += r.text();
    EXPECT_EQ(HttpText(http, i), single_text) << "choice " << i;
    EXPECT_EQ(HttpText(streamed, i), single_text) << "choice " << i;
    EXPECT_EQ(http.body["choices"][i]["index"], i);
  }
  // gRPC: each choice's last response has its finish_reason; the call's last has the usage.
  std::vector<int> finishes(kN, 0);
  for (const auto& r : n_way.responses) {
    ASSERT_GE(r.index(), 0);
    ASSERT_LT(r.index(), kN);
    if (r.finish_reason() != abcd::v1::FINISH_REASON_UNSPECIFIED) ++finishes[r.index()];
  }
  EXPECT_EQ(finishes, std::vector<int>(kN, 1));
  EXPECT_TRUE(n_way.responses.back().has_usage());
  // SSE: every choice ends with a finish_reason chunk, and the usage comes last.
  std::vector<int> stream_finishes(kN, 0);
  for (const auto& chunk : streamed.chunks) {
    for (const auto& choice : chunk["choices"]) {
      if (!choice["finish_reason"].is_null()) ++stream_finishes[choice["index"].get<int>()];
    }
  }
  EXPECT_EQ(stream_finishes, std::vector<int>(kN, 1));
  EXPECT_TRUE(streamed.chunks.back()["usage"].is_object()) << streamed.chunks.back().dump();
  EXPECT_TRUE(streamed.chunks.back()["choices"].empty()) << streamed.chunks.back().dump();
  EXPECT_EQ(
      n_way.usage().completion_tokens(),
      static_cast<int>(n_way.tokens(0).size() + n_way.tokens(1).size() + n_way.tokens(2).size()));
  EXPECT_EQ(c().Complete(c().Body(prompt, Sampling{false, 1}, "", 17)).status, 400);  // > 16
}

// The same requests sharing a long prefix on a server without the cache give the same tokens;
// this server's hit counter moves.
TEST_F(SessionE2eTest, PrefixCacheChangesNothingButTheCounters) {
  SessionClient off({"--prefix_cache_mb", "0"});
  ASSERT_TRUE(off.started()) << off.server().Log();
  const std::string hits = "abcd_prefix_cache_hit_tokens_total{model=\"abc-lm-untrained\"}";
  const double hits_before = c().Metric(hits);
  ASSERT_GE(hits_before, 0);
  const std::vector<int32_t> prefix = Tokens(200, 31);
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = prefix;
    const std::vector<int32_t> suffix = Tokens(5, 40 + i);
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    for (const Sampling sampling : {Sampling{true, 0}, Sampling{false, 9}}) {
      const GrpcTurn with_cache = c().Generate(c().Request(prompt, sampling));
      const GrpcTurn without = off.Generate(off.Request(prompt, sampling));
      ASSERT_TRUE(with_cache.status.ok() && without.status.ok());
      EXPECT_EQ(with_cache.tokens(), without.tokens()) << "request " << i;
      EXPECT_EQ(without.usage().cached_prompt_tokens(), 0);
      // Request 1 diverges from request 0 after the prefix and leaves a snapshot there.
      if (i == 2) {
        EXPECT_GE(with_cache.usage().cached_prompt_tokens(), 200);
      }
    }
  }
  EXPECT_GE(c().Metric(hits) - hits_before, 200 * 2);
  EXPECT_GT(c().Metric("abcd_prefix_cache_entries{model=\"abc-lm-untrained\"}"), 0);
  EXPECT_GT(c().Metric("abcd_prefix_cache_bytes{model=\"abc-lm-untrained\"}"), 0);
  EXPECT_EQ(off.Metric(hits), 0);
}

}  // namespace
}  // namespace abcd
