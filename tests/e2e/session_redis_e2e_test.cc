// Sessions through Redis end to end (issue 14): two abcd-server replicas on one real
// redis-server (tests/server/sessions/redis_process.h) serve one conversation alternately, token
// for token the same as on one server; a Redis outage fails session requests cleanly (UNAVAILABLE /
// 503 naming the store) while plain requests go on; Redis back on its port: sessions work again.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/e2e/session_client.h"
#include "tests/server/sessions/redis_process.h"

namespace abcd {
namespace {

using testing::GrpcTurn;
using testing::HttpTurn;
using testing::RedisProcess;
using testing::Sampling;
using testing::SessionClient;
using testing::Tokens;

TEST(SessionRedisE2eTest, ConversationAlternatingReplicasEqualsOneServer) {
  RedisProcess redis;
  ASSERT_TRUE(redis.started()) << redis.error();
  SessionClient a({"--session_store", redis.url()});
  SessionClient b({"--session_store", redis.url(1)});  // another db: a separate store
  SessionClient b_shared({"--session_store", redis.url()});
  ASSERT_TRUE(a.started()) << a.server().Log();
  ASSERT_TRUE(b.started()) << b.server().Log();
  ASSERT_TRUE(b_shared.started()) << b_shared.server().Log();

  for (const Sampling sampling : {Sampling{true, 0}, Sampling{false, 3}}) {
    std::string alternating = "new";
    std::string single = "new";
    for (int turn = 0; turn < 4; ++turn) {
      const std::vector<int32_t> prompt = Tokens(4 + turn, 50 + turn);
      SessionClient& replica = turn % 2 == 0 ? a : b_shared;
      const GrpcTurn on_replicas = replica.Generate(replica.Request(prompt, sampling, alternating));
      ASSERT_TRUE(on_replicas.status.ok()) << on_replicas.status.error_message();
      alternating = on_replicas.first_session_id();
      const GrpcTurn on_one = b.Generate(b.Request(prompt, sampling, single));
      ASSERT_TRUE(on_one.status.ok()) << on_one.status.error_message();
      single = on_one.first_session_id();
      EXPECT_EQ(on_replicas.tokens(), on_one.tokens()) << "turn " << turn;
    }
    // The session is visible from both replicas; a session of db 1 is not in db 0.
    EXPECT_EQ(a.http().Get("/v1/sessions/" + alternating)->status, 200);
    EXPECT_EQ(b_shared.http().Get("/v1/sessions/" + alternating)->status, 200);
    EXPECT_EQ(a.http().Get("/v1/sessions/" + single)->status, 404);
  }
}

TEST(SessionRedisE2eTest, OutageFailsSessionRequestsOnlyAndRecovers) {
  RedisProcess redis;
  ASSERT_TRUE(redis.started()) << redis.error();
  SessionClient server({"--session_store", redis.url()});
  ASSERT_TRUE(server.started()) << server.server().Log();
  const GrpcTurn before = server.Generate(server.Request(Tokens(4, 1), Sampling{}, "new"));
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  const std::string session = before.first_session_id();

  redis.Kill();
  const auto start = std::chrono::steady_clock::now();
  const GrpcTurn grpc_turn = server.Generate(server.Request(Tokens(4, 2), Sampling{}, session));
  EXPECT_EQ(grpc_turn.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(grpc_turn.status.error_message().find(redis.url()), std::string::npos)
      << grpc_turn.status.error_message();
  const HttpTurn http_new = server.Complete(server.Body(Tokens(4, 2), Sampling{}, "new"));
  EXPECT_EQ(http_new.status, 503) << http_new.body.dump();
  const HttpTurn http_old = server.Complete(server.Body(Tokens(4, 2), Sampling{}, session));
  EXPECT_EQ(http_old.status, 503) << http_old.body.dump();
  EXPECT_NE(http_old.body.dump().find("redis://"), std::string::npos) << http_old.body.dump();
  EXPECT_EQ(server.http().Get("/v1/sessions/" + session)->status, 503);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // Plain requests go on.
  const GrpcTurn plain = server.Generate(server.Request(Tokens(4, 3), Sampling{}));
  EXPECT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_EQ(server.Complete(server.Body(Tokens(4, 3), Sampling{})).status, 200);
  EXPECT_GT(server.Metric("abcd_session_store_errors_total"), 0);

  ASSERT_TRUE(redis.Restart());
  GrpcTurn after;
  for (int i = 0; i < 100; ++i) {  // the store's breaker retries after about a second
    after = server.Generate(server.Request(Tokens(4, 4), Sampling{}, "new"));
    if (after.status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  const GrpcTurn next =
      server.Generate(server.Request(Tokens(3, 5), Sampling{}, after.first_session_id()));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  // Redis restarted empty: the old session is gone.
  EXPECT_EQ(server.Generate(server.Request(Tokens(3, 5), Sampling{}, session)).status.error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace abcd
