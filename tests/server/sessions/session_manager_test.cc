// SessionManager: server-chosen ids, Continue/Commit/lease semantics, import/export, the
// session metrics on the server's registry, and two managers ("replicas") on one Redis.
#include "server/sessions/session_manager.h"

#include <signal.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/server_metrics.h"
#include "tests/server/sessions/redis_process.h"

namespace abcd {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SessionStore> Store(absl::string_view spec, SessionStoreOptions options = {}) {
  absl::StatusOr<std::unique_ptr<SessionStore>> store = CreateSessionStore(spec, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

TEST(SessionManager, IdsAreUniqueLowercaseHex128Bits) {
  absl::flat_hash_set<std::string> ids;
  for (int i = 0; i < 2000; ++i) {
    std::string id = SessionManager::NewId();
    ASSERT_EQ(id.size(), 32u);
    ASSERT_TRUE(SessionManager::CheckId(id).ok()) << id;
    ids.insert(std::move(id));
  }
  EXPECT_EQ(ids.size(), 2000u);
}

TEST(SessionManager, CheckIdRefusesAnythingElseNamingTheField) {
  for (const char* bad :
       {"", "new", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
        "0123456789ABCDEF0123456789abcdef", "0123456789abcdef0123456789abcdeg",
        "../../../../etc/passwd0123456789a"}) {
    absl::Status s = SessionManager::CheckId(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(s.message(), HasSubstr("session_id")) << bad;
  }
}

TEST(SessionManager, CreateCommitContinue) {
  ServerMetrics server_metrics;
  SessionMetrics metrics(server_metrics.registry());
  SessionManager manager(Store("memory"), &metrics);
  EXPECT_EQ(manager.store().name(), "memory");

  absl::StatusOr<SessionLease> lease = manager.Create();
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_TRUE(lease->is_new());
  EXPECT_TRUE(lease->blob().empty());
  const std::string id = lease->id();
  EXPECT_TRUE(SessionManager::CheckId(id).ok());
  // Created but not committed: in use, and not stored yet.
  EXPECT_TRUE(absl::IsAborted(manager.Continue(id).status()));
  EXPECT_TRUE(absl::IsNotFound(manager.Get(id).status()));
  ASSERT_TRUE(manager.Commit(*std::move(lease), "state-1").ok());

  absl::StatusOr<SessionLease> turn2 = manager.Continue(id);
  ASSERT_TRUE(turn2.ok()) << turn2.status();
  EXPECT_FALSE(turn2->is_new());
  EXPECT_EQ(turn2->id(), id);
  EXPECT_EQ(turn2->blob(), "state-1");
  EXPECT_EQ(turn2->TakeBlob(), "state-1");
  EXPECT_TRUE(turn2->blob().empty());
  absl::Status busy = manager.Continue(id).status();
  EXPECT_TRUE(absl::IsAborted(busy)) << busy;
  EXPECT_EQ(busy.message(), absl::StrCat("session ", id, " is in use by another request"));
  ASSERT_TRUE(manager.Commit(*std::move(turn2), "state-2").ok());
  EXPECT_EQ(manager.Get(id)->blob, "state-2");

  const std::string text = server_metrics.Render();
  EXPECT_THAT(text, HasSubstr("abcd_session_hits_total 1\n"));
  EXPECT_THAT(text, HasSubstr("abcd_session_misses_total 0\n"));
}

TEST(SessionManager, DroppedLeaseUnlocksWithoutSaving) {
  SessionManager manager(Store("memory"), nullptr);
  absl::StatusOr<std::string> id = manager.Import("saved");
  ASSERT_TRUE(id.ok()) << id.status();
  {
    absl::StatusOr<SessionLease> lease = manager.Continue(*id);
    ASSERT_TRUE(lease.ok()) << lease.status();
    SessionLease moved = *std::move(lease);  // moving does not unlock
    EXPECT_TRUE(absl::IsAborted(manager.Continue(*id).status()));
    EXPECT_FALSE(lease->held());
    EXPECT_TRUE(moved.held());
    // A failed request: `moved` goes out of scope without Commit.
  }
  absl::StatusOr<SessionLease> again = manager.Continue(*id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->blob(), "saved");  // unchanged

  // A new session whose first request fails leaves nothing behind.
  std::string new_id;
  {
    absl::StatusOr<SessionLease> created = manager.Create();
    ASSERT_TRUE(created.ok());
    new_id = created->id();
  }
  EXPECT_TRUE(absl::IsNotFound(manager.Continue(new_id).status()));

  // Move-assigning over a held lease releases the overwritten one.
  absl::StatusOr<std::string> other = manager.Import("other");
  ASSERT_TRUE(other.ok());
  absl::StatusOr<SessionLease> b = manager.Continue(*other);
  ASSERT_TRUE(b.ok());
  *again = *std::move(b);
  EXPECT_TRUE(manager.Continue(*id).ok());  // released by the assignment (and dropped again)
  EXPECT_TRUE(absl::IsAborted(manager.Continue(*other).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(manager.Commit(*std::move(b), "x")));  // moved from
}

TEST(SessionManager, UnknownOrMalformedIdsAndMisses) {
  ServerMetrics server_metrics;
  SessionMetrics metrics(server_metrics.registry());
  SessionManager manager(Store("memory"), &metrics);
  const std::string unknown = SessionManager::NewId();
  absl::Status s = manager.Continue(unknown).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("session ", unknown, " not found (unknown or expired)"));
  EXPECT_TRUE(absl::IsNotFound(manager.Continue(unknown).status()));  // the miss unlocked it
  EXPECT_TRUE(absl::IsNotFound(manager.Get(unknown).status()));
  EXPECT_TRUE(absl::IsNotFound(manager.Delete(unknown)));
  EXPECT_THAT(manager.Delete(unknown).message(), HasSubstr("not found (unknown or expired)"));
  EXPECT_TRUE(absl::IsInvalidArgument(manager.Continue("new").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(manager.Get("ABC").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(manager.Delete("")));
  const std::string text = server_metrics.Render();
  EXPECT_THAT(text, HasSubstr("abcd_session_misses_total 2\n"));
  EXPECT_THAT(text, HasSubstr("abcd_session_store_errors_total 0\n"));
}

TEST(SessionManager, ImportExportDelete) {
  SessionManager manager(Store("memory"), nullptr);
  const std::string blob("\0\x01\xff state", 9);
  absl::StatusOr<std::string> a = manager.Import(blob);
  absl::StatusOr<std::string> b = manager.Import(blob);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(manager.Get(*a)->blob, blob);
  ASSERT_TRUE(manager.Delete(*a).ok());
  EXPECT_TRUE(absl::IsNotFound(manager.Get(*a).status()));
  EXPECT_TRUE(manager.Get(*b).ok());
}

TEST(SessionManager, GaugesAndEvictionsOnTheServerRegistry) {
  ServerMetrics server_metrics;
  SessionMetrics metrics(server_metrics.registry());
  SessionStoreOptions options;
  options.budget_bytes = 100;
  SessionManager manager(Store("memory", options), &metrics);
  server_metrics.AddRenderHook([&manager] { manager.RefreshMetrics(); });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(manager.Import(std::string(40, 'x')).ok());
  std::string text = server_metrics.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE abcd_sessions_stored gauge\nabcd_sessions_stored 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE abcd_session_bytes gauge\nabcd_session_bytes 80\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE abcd_session_evictions_total counter\n"
                              "abcd_session_evictions_total 1\n"));
  // A blob over the whole budget is refused and counted as a store error.
  absl::Status big = manager.Import(std::string(101, 'x')).status();
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  ASSERT_TRUE(manager.Import(std::string(40, 'x')).ok());
  text = server_metrics.Render();
  EXPECT_THAT(text, HasSubstr("abcd_session_evictions_total 2\n"));  // counted once each
  EXPECT_THAT(text, HasSubstr("abcd_session_store_errors_total 1\n"));
}

TEST(SessionManager, StoreOutageIsUnavailableAndCounted) {
  signal(SIGPIPE, SIG_IGN);
  ServerMetrics server_metrics;
  SessionMetrics metrics(server_metrics.registry());
  const std::string url = absl::StrCat("redis://127.0.0.1:", testing::RedisProcess::FreePort());
  SessionManager manager(Store(url), &metrics);
  server_metrics.AddRenderHook([&manager] { manager.RefreshMetrics(); });
  absl::Status s = manager.Create().status();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(url));
  EXPECT_TRUE(absl::IsUnavailable(manager.Continue(SessionManager::NewId()).status()));
  EXPECT_TRUE(absl::IsUnavailable(manager.Import("x").status()));
  const std::string text = server_metrics.Render();
  EXPECT_THAT(text, HasSubstr("abcd_session_store_errors_total 3\n"));
  EXPECT_THAT(text, HasSubstr("abcd_session_misses_total 0\n"));
  EXPECT_THAT(text, HasSubstr("abcd_sessions_stored Nan\n"));  // unknown for redis
}

// Turn 1 on replica A, turn 2 on replica B, turn 3 back on A; B cannot take a session A holds.
TEST(SessionManager, TwoReplicasShareSessionsThroughRedis) {
  signal(SIGPIPE, SIG_IGN);
  testing::RedisProcess redis;
  ASSERT_TRUE(redis.started()) << redis.error();
  SessionManager a(Store(redis.url()), nullptr);
  SessionManager b(Store(redis.url()), nullptr);

  absl::StatusOr<SessionLease> turn1 = a.Create();
  ASSERT_TRUE(turn1.ok()) << turn1.status();
  const std::string id = turn1->id();
  EXPECT_TRUE(absl::IsAborted(b.Continue(id).status()));
  ASSERT_TRUE(a.Commit(*std::move(turn1), "after turn 1").ok());

  absl::StatusOr<SessionLease> turn2 = b.Continue(id);
  ASSERT_TRUE(turn2.ok()) << turn2.status();
  EXPECT_EQ(turn2->blob(), "after turn 1");
  EXPECT_TRUE(absl::IsAborted(a.Continue(id).status()));
  ASSERT_TRUE(b.Commit(*std::move(turn2), "after turn 2").ok());

  absl::StatusOr<SessionLease> turn3 = a.Continue(id);
  ASSERT_TRUE(turn3.ok()) << turn3.status();
  EXPECT_EQ(turn3->blob(), "after turn 2");
  ASSERT_TRUE(b.Delete(id).ok());
  EXPECT_TRUE(absl::IsNotFound(a.Get(id).status()));
}

}  // namespace
}  // namespace abcd
