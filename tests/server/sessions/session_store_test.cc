// SessionStore: the memory store (budget, LRU, TTL, lock), the --session_store spec, and the
// Redis store against a real redis-server (same semantics, binary blobs, a lock shared by two
// "replicas", TTL as Redis expiry, outage -> fast UNAVAILABLE -> recovery).
#include "server/sessions/session_store.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/sessions/redis_process.h"

namespace abcd {
namespace {

using ::testing::HasSubstr;

// A clock the memory-store tests move by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  std::function<absl::Time()> Function() {
    return [this] { return now; };
  }
};

std::unique_ptr<SessionStore> Memory(SessionStoreOptions options) {
  absl::StatusOr<std::unique_ptr<SessionStore>> store = CreateSessionStore("memory", options);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

TEST(MemorySessionStore, PutGetReplaceDelete) {
  FakeClock clock;
  SessionStoreOptions options;
  options.clock = clock.Function();
  auto store = Memory(options);
  EXPECT_EQ(store->name(), "memory");
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
  ASSERT_TRUE(store->Put("a", "one").ok());
  absl::StatusOr<StoredSession> got = store->Get("a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->blob, "one");
  EXPECT_EQ(got->last_used, clock.now);

  clock.now += absl::Minutes(5);  // Get does not refresh last_used; Put does
  EXPECT_EQ(store->Get("a")->last_used, clock.now - absl::Minutes(5));
  ASSERT_TRUE(store->Put("a", "three").ok());
  EXPECT_EQ(store->Get("a")->blob, "three");
  EXPECT_EQ(store->Get("a")->last_used, clock.now);
  SessionStoreStats stats = store->Stats();
  EXPECT_EQ(stats.sessions, 1);
  EXPECT_EQ(stats.bytes, 5);

  ASSERT_TRUE(store->Delete("a").ok());
  EXPECT_TRUE(absl::IsNotFound(store->Delete("a")));
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
  EXPECT_EQ(store->Stats().sessions, 0);
  EXPECT_EQ(store->Stats().bytes, 0);
}

TEST(MemorySessionStore, EvictsLeastRecentlySavedBeyondBudget) {
  SessionStoreOptions options;
  options.budget_bytes = 100;
  auto store = Memory(options);
  ASSERT_TRUE(store->Put("a", std::string(40, 'a')).ok());
  ASSERT_TRUE(store->Put("b", std::string(40, 'b')).ok());
  ASSERT_TRUE(store->Put("a", std::string(40, 'A')).ok());  // a is now the most recent
  ASSERT_TRUE(store->Put("c", std::string(40, 'c')).ok());  // 120 > 100: b goes
  EXPECT_TRUE(absl::IsNotFound(store->Get("b").status()));
  EXPECT_EQ(store->Get("a")->blob, std::string(40, 'A'));
  EXPECT_TRUE(store->Get("c").ok());
  SessionStoreStats stats = store->Stats();
  EXPECT_EQ(stats.sessions, 2);
  EXPECT_EQ(stats.bytes, 80);
  EXPECT_EQ(stats.evictions, 1);

  // One blob of exactly the budget evicts everything else.
  ASSERT_TRUE(store->Put("d", std::string(100, 'd')).ok());
  stats = store->Stats();
  EXPECT_EQ(stats.sessions, 1);
  EXPECT_EQ(stats.bytes, 100);
  EXPECT_EQ(stats.evictions, 3);
}

TEST(MemorySessionStore, RefusesBlobBiggerThanTheWholeBudget) {
  SessionStoreOptions options;
  options.budget_bytes = 100;
  auto store = Memory(options);
  ASSERT_TRUE(store->Put("keep", "x").ok());
  absl::Status s = store->Put("big", std::string(101, 'x'));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("big"));
  EXPECT_THAT(s.message(), HasSubstr("101 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("budget of 100 bytes"));
  EXPECT_TRUE(store->Get("keep").ok());  // nothing evicted for a refused blob
  EXPECT_EQ(store->Stats().evictions, 0);
}

TEST(MemorySessionStore, SessionsUnusedForTtlAreGone) {
  FakeClock clock;
  SessionStoreOptions options;
  options.ttl = absl::Hours(1);
  options.clock = clock.Function();
  auto store = Memory(options);
  ASSERT_TRUE(store->Put("old", "1").ok());
  clock.now += absl::Minutes(40);
  ASSERT_TRUE(store->Put("new", "22").ok());
  clock.now += absl::Minutes(19);
  EXPECT_TRUE(store->Get("old").ok());
  clock.now += absl::Minutes(1);  // old: exactly ttl since its Put
  EXPECT_TRUE(absl::IsNotFound(store->Get("old").status()));
  EXPECT_TRUE(absl::IsNotFound(store->Delete("old")));
  SessionStoreStats stats = store->Stats();  // swept, and expiry is not an eviction
  EXPECT_EQ(stats.sessions, 1);
  EXPECT_EQ(stats.bytes, 2);
  EXPECT_EQ(stats.evictions, 0);

  ASSERT_TRUE(store->Put("new", "22").ok());  // Put refreshes the TTL
  clock.now += absl::Minutes(59);
  EXPECT_TRUE(store->Get("new").ok());
  clock.now += absl::Minutes(2);
  EXPECT_EQ(store->Stats().sessions, 0);
  EXPECT_EQ(store->Stats().bytes, 0);
}

TEST(MemorySessionStore, LockIsExclusivePerId) {
  auto store = Memory({});
  ASSERT_TRUE(store->Lock("s1").ok());
  absl::Status again = store->Lock("s1");
  EXPECT_TRUE(absl::IsAborted(again)) << again;
  EXPECT_EQ(again.message(), "session s1 is in use by another request");
  EXPECT_TRUE(store->Lock("s2").ok());  // other ids are independent
  store->Unlock("s1");
  EXPECT_TRUE(store->Lock("s1").ok());
  store->Unlock("never-locked");  // harmless
}

TEST(MemorySessionStore, ConcurrentCallersSeeConsistentState) {
  SessionStoreOptions options;
  options.budget_bytes = 64 * 1024;
  auto store = Memory(options);
  std::vector<std::thread> threads;
  std::atomic<int> locks_won{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string id = absl::StrCat("s", (t * 7 + i) % 50);
        ASSERT_TRUE(store->Put(id, std::string(1000, static_cast<char>('a' + t))).ok());
        absl::StatusOr<StoredSession> got = store->Get(id);
        if (got.ok()) {
          EXPECT_EQ(got->blob.size(), 1000u);
        }
        if (store->Lock("shared").ok()) {
          ++locks_won;
          store->Unlock("shared");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  SessionStoreStats stats = store->Stats();
  EXPECT_LE(stats.bytes, options.budget_bytes);
  EXPECT_EQ(stats.bytes, stats.sessions * 1000);
  EXPECT_GT(locks_won.load(), 0);
}

TEST(CreateSessionStore, ParsesSpecsAndNamesTheFlagWhenMalformed) {
  absl::StatusOr<std::unique_ptr<SessionStore>> redis =
      CreateSessionStore("redis://cache.internal:6380/3", {});
  ASSERT_TRUE(redis.ok()) << redis.status();  // created without connecting
  EXPECT_EQ((*redis)->name(), "redis://cache.internal:6380/3");
  absl::StatusOr<RedisAddress> address = ParseRedisUrl("redis://cache.internal:6380/3");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address->host, "cache.internal");
  EXPECT_EQ(address->port, 6380);
  EXPECT_EQ(address->db, 3);
  address = ParseRedisUrl("redis://[::1]:6379");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(address->host, "::1");
  EXPECT_EQ(address->db, 0);

  for (const char* bad :
       {"", "Memory", "mem", "redis://", "redis://host", "redis://host:", "redis://:6379",
        "redis://host:0", "redis://host:65536", "redis://host:63x9", "redis://host:6379/",
        "redis://host:6379/x", "redis://host:6379/-1", "redis://user:pw@host:6379",
        "rediss://host:6379", "http://host:6379", "redis://[::1:6379"}) {
    absl::StatusOr<std::unique_ptr<SessionStore>> store = CreateSessionStore(bad, {});
    EXPECT_TRUE(absl::IsInvalidArgument(store.status())) << bad << ": " << store.status();
    EXPECT_THAT(store.status().message(), HasSubstr("--session_store")) << bad;
  }

  SessionStoreOptions options;
  options.budget_bytes = 0;
  EXPECT_THAT(CreateSessionStore("memory", options).status().message(), HasSubstr("budget_bytes"));
  options = {};
  options.ttl = absl::ZeroDuration();
  EXPECT_THAT(CreateSessionStore("memory", options).status().message(), HasSubstr("ttl"));
}

// ---- Redis ---------------------------------------------------------------------------------

class RedisSessionStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { signal(SIGPIPE, SIG_IGN); }  // as abcd-server does

  void SetUp() override {
    redis_ = std::make_unique<testing::RedisProcess>();
    ASSERT_TRUE(redis_->started()) << redis_->error();
  }

  std::unique_ptr<SessionStore> Redis(SessionStoreOptions options = {}, int db = 0) {
    absl::StatusOr<std::unique_ptr<SessionStore>> store =
        CreateSessionStore(redis_->url(db), options);
    EXPECT_TRUE(store.ok()) << store.status();
    return *std::move(store);
  }

  std::unique_ptr<testing::RedisProcess> redis_;
};

TEST_F(RedisSessionStoreTest, PutGetReplaceDeleteWithBinaryBlobs) {
  auto store = Redis();
  EXPECT_EQ(store->name(), redis_->url());
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
  std::string blob;
  for (int i = 0; i < 3 * 256; ++i) blob.push_back(static_cast<char>(i % 256));  // \0 \r\n ...
  blob += std::string(1 << 20, '\0');
  const absl::Time before = absl::Now();
  ASSERT_TRUE(store->Put("a", blob).ok());
  absl::StatusOr<StoredSession> got = store->Get("a");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->blob, blob);
  EXPECT_GE(got->last_used, before - absl::Milliseconds(1));
  EXPECT_LE(got->last_used, absl::Now());

  ASSERT_TRUE(store->Put("a", "").ok());  // an empty blob is a blob
  EXPECT_EQ(store->Get("a")->blob, "");
  ASSERT_TRUE(store->Delete("a").ok());
  EXPECT_TRUE(absl::IsNotFound(store->Delete("a")));
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
  SessionStoreStats stats = store->Stats();  // documented: unknown without a keyspace scan
  EXPECT_EQ(stats.sessions, -1);
  EXPECT_EQ(stats.bytes, -1);
  EXPECT_EQ(stats.evictions, 0);
}

TEST_F(RedisSessionStoreTest, DatabasesAreSeparate) {
  auto db0 = Redis({}, 0);
  auto db5 = Redis({}, 5);
  ASSERT_TRUE(db0->Put("x", "zero").ok());
  EXPECT_TRUE(absl::IsNotFound(db5->Get("x").status()));
  ASSERT_TRUE(db5->Put("x", "five").ok());
  EXPECT_EQ(db0->Get("x")->blob, "zero");
  EXPECT_EQ(db5->Get("x")->blob, "five");
}

TEST_F(RedisSessionStoreTest, TtlIsRedisExpiryRefreshedByPut) {
  SessionStoreOptions options;
  options.ttl = absl::Seconds(1);
  auto store = Redis(options);
  ASSERT_TRUE(store->Put("a", "blob").ok());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(store->Get("a")->blob, "blob");
  // Get does not refresh the expiry: at most 700 ms left.
  int64_t left = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripPrefix(redis_->Command({"PTTL", "abcd:session:a"}), ":"), &left));
  EXPECT_LE(left, 700);
  ASSERT_TRUE(store->Put("a", "blob2").ok());  // Put does: ~1000 ms again
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripPrefix(redis_->Command({"PTTL", "abcd:session:a"}), ":"), &left));
  EXPECT_GT(left, 800);
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));
}

TEST_F(RedisSessionStoreTest, LockIsSharedByTwoReplicas) {
  auto a = Redis();
  auto b = Redis();
  ASSERT_TRUE(a->Put("s", "turn1").ok());
  EXPECT_EQ(b->Get("s")->blob, "turn1");  // stateless replicas: both see every session

  ASSERT_TRUE(a->Lock("s").ok());
  absl::Status busy = b->Lock("s");
  EXPECT_TRUE(absl::IsAborted(busy)) << busy;
  EXPECT_EQ(busy.message(), "session s is in use by another request");
  EXPECT_TRUE(absl::IsAborted(a->Lock("s")));  // also within one replica
  b->Unlock("s");                              // not b's lock: no effect
  EXPECT_TRUE(absl::IsAborted(b->Lock("s")));
  a->Unlock("s");
  EXPECT_TRUE(b->Lock("s").ok());
  b->Unlock("s");
}

// An unlock Redis refuses (here: writes refused for want of replicas) is not lost: it is
// retried after the next command that succeeds, instead of the session staying locked for
// lock_ttl.
TEST_F(RedisSessionStoreTest, FailedUnlockIsRetriedLater) {
  auto a = Redis();
  auto b = Redis();
  ASSERT_TRUE(a->Lock("s").ok());
  ASSERT_EQ(redis_->Command({"CONFIG", "SET", "min-replicas-to-write", "1"}), "+OK");
  a->Unlock("s");  // refused: NOREPLICAS
  absl::Status s = b->Lock("s");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;  // writes refused: UNAVAILABLE, naming the store
  EXPECT_THAT(s.message(), HasSubstr(redis_->url()));
  ASSERT_EQ(redis_->Command({"CONFIG", "SET", "min-replicas-to-write", "0"}), "+OK");
  EXPECT_TRUE(absl::IsAborted(b->Lock("s")));           // a's lock is still there
  EXPECT_TRUE(absl::IsNotFound(a->Get("x").status()));  // a succeeds at something: retries
  EXPECT_TRUE(b->Lock("s").ok());
  b->Unlock("s");
}

// A lock taken again after it expired is not released by its previous holder's Unlock.
TEST_F(RedisSessionStoreTest, ExpiredLockRetakenIsNotReleasedByTheOldHolder) {
  SessionStoreOptions short_locks;
  short_locks.lock_ttl = absl::Milliseconds(200);
  auto a = Redis(short_locks);
  auto b = Redis();  // default lock_ttl: b's lock stays for the rest of the test
  ASSERT_TRUE(a->Lock("s").ok());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(b->Lock("s").ok());  // a's lock expired (a slow request)
  a->Unlock("s");                  // a finishes late: must not free b's lock
  EXPECT_EQ(redis_->Command({"EXISTS", "abcd:session-lock:s"}), ":1");
  EXPECT_TRUE(absl::IsAborted(a->Lock("s")));
}

TEST_F(RedisSessionStoreTest, LockOfACrashedReplicaExpires) {
  SessionStoreOptions short_locks;
  short_locks.lock_ttl = absl::Seconds(1);
  auto crashed = Redis(short_locks);
  auto b = Redis();
  ASSERT_TRUE(crashed->Lock("s").ok());
  crashed.reset();  // never unlocks
  EXPECT_TRUE(absl::IsAborted(b->Lock("s")));
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_TRUE(b->Lock("s").ok());
}

TEST_F(RedisSessionStoreTest, ConcurrentCallersShareThePool) {
  SessionStoreOptions options;
  options.max_connections = 2;
  auto store = Redis(options);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        const std::string id = absl::StrCat("t", t, "-", i % 5);
        const std::string blob = absl::StrCat("blob ", t, " ", i);
        if (!store->Put(id, blob).ok()) ++failures;
        absl::StatusOr<StoredSession> got = store->Get(id);
        if (!got.ok() || got->blob != blob) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

// Redis not there at start: the store is created, its calls fail UNAVAILABLE naming it.
TEST(RedisSessionStoreDown, CreatedWhileDownAndFailsUnavailable) {
  signal(SIGPIPE, SIG_IGN);
  const std::string url = absl::StrCat("redis://127.0.0.1:", testing::RedisProcess::FreePort());
  absl::StatusOr<std::unique_ptr<SessionStore>> store = CreateSessionStore(url, {});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::Status s = (*store)->Put("a", "x");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(s.message(), absl::StrCat("session store ", url, " unavailable: Connection refused"));
  EXPECT_TRUE(absl::IsUnavailable((*store)->Lock("a")));
  (*store)->Unlock("a");  // best effort, no crash
}

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// Redis killed: the first call fails within the timeout, calls within the breaker window fail
// at once, and after a restart on the same port the store works again.
TEST_F(RedisSessionStoreTest, OutageFailsFastAndRecovers) {
  SessionStoreOptions options;
  options.timeout = absl::Milliseconds(500);
  options.breaker = absl::Seconds(1);
  auto store = Redis(options);
  ASSERT_TRUE(store->Put("a", "before").ok());

  redis_->Kill();
  absl::Time start = absl::Now();
  absl::Status s = store->Get("a").status();
  const double first = SecondsSince(start);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("session store ", redis_->url(), " unavailable")));
  EXPECT_LT(first, 0.5 + 0.25);
  const absl::Time tripped = absl::Now();
  double slowest = 0;
  for (int i = 0; i < 20; ++i) {
    start = absl::Now();
    s = store->Put("b", "x");
    slowest = std::max(slowest, SecondsSince(start));
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  }
  EXPECT_LT(slowest, 0.1) << "calls within the breaker window";
  std::printf("redis killed: first call %.2f ms, slowest of 20 in the breaker window %.3f ms\n",
              first * 1e3, slowest * 1e3);
  EXPECT_LT(SecondsSince(tripped), 0.5);

  ASSERT_TRUE(redis_->Restart()) << redis_->error();
  EXPECT_TRUE(absl::IsUnavailable(store->Put("b", "x")));  // still inside the window
  absl::SleepFor(absl::Seconds(1) - (absl::Now() - tripped) + absl::Milliseconds(50));
  s = store->Put("b", "after");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(store->Get("b")->blob, "after");
  EXPECT_TRUE(absl::IsNotFound(store->Get("a").status()));  // nothing persisted across restart
}

// Redis stalled (SIGSTOP: connections accepted, no replies): a call returns UNAVAILABLE after
// the command timeout, the next ones at once.
TEST_F(RedisSessionStoreTest, StalledRedisTimesOut) {
  SessionStoreOptions options;
  options.timeout = absl::Milliseconds(300);
  auto store = Redis(options);
  ASSERT_TRUE(store->Put("a", "x").ok());
  redis_->Pause();
  absl::Time start = absl::Now();
  absl::Status s = store->Get("a").status();
  const double first = SecondsSince(start);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
  EXPECT_GE(first, 0.25);
  EXPECT_LT(first, 0.3 + 0.25);
  start = absl::Now();
  EXPECT_TRUE(absl::IsUnavailable(store->Lock("a")));
  const double next = SecondsSince(start);
  EXPECT_LT(next, 0.1);
  std::printf("redis stalled: first call %.1f ms (timeout 300 ms), next %.3f ms\n", first * 1e3,
              next * 1e3);
  redis_->Resume();
  absl::SleepFor(absl::Milliseconds(1100));
  EXPECT_EQ(store->Get("a")->blob, "x");
}

}  // namespace
}  // namespace abcd
