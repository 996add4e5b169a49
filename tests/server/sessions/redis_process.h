// Starts a real redis-server for tests on a free loopback port (no persistence, its files in a
// temporary directory) and waits until it answers PING. Kill/Restart/Pause/Resume simulate
// outages; the destructor kills it. The child dies with the test process (PR_SET_PDEATHSIG).
//
// The binary is $ABCD_REDIS_SERVER or /usr/bin/redis-server (Debian `redis-server`, installed
// by `deploy/scripts/setup.sh test`). Not thread-safe: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace abcd::testing {

class RedisProcess {
 public:
  // Starts on a free loopback port; started() says whether it answers PING (error() why not).
  RedisProcess();
  ~RedisProcess();
  RedisProcess(const RedisProcess&) = delete;
  RedisProcess& operator=(const RedisProcess&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // "redis://127.0.0.1:PORT/DB".
  std::string url(int db = 0) const;

  // SIGKILL and reap (an outage: clients see refused connections).
  void Kill();
  // Starts again on the same port (empty: nothing was persisted); true when it answers PING.
  bool Restart();
  // SIGSTOP / SIGCONT (a stalled server: connections open, no replies).
  void Pause();
  void Resume();

  // Sends one command (e.g. {"CONFIG", "SET", "min-replicas-to-write", "1"}) on a fresh
  // connection and returns the reply's first line ("+OK", "-ERR ...", ":1", "$5"), or "" when
  // there is no reply within 2 s.
  std::string Command(const std::vector<std::string>& args) const;

  // A loopback TCP port that was free a moment ago (bound to 127.0.0.1:0 and closed).
  static int FreePort();

 private:
  bool Start(int port);

  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
  std::string error_;
};

}  // namespace abcd::testing
