// Starts the real abcd-server binary on ephemeral loopback ports for end-to-end tests and
// stops it with SIGTERM, reporting the exit code.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace abcd::testing {

// The sanitizer stage of setup.sh runs the e2e tests against an ASan/UBSan server, with
// ASAN_OPTIONS set. The tests' time and memory bounds are the optimised build's: under the
// sanitizers time limits stretch by kSanitizerSlowdown (TimeLimit) and RSS bounds are not
// checked (ASan's quarantine keeps freed memory resident); the scenarios run unchanged.
bool UnderSanitizers();
inline constexpr double kSanitizerSlowdown = 8.0;
inline double TimeLimit(double seconds) {
  return UnderSanitizers() ? seconds * kSanitizerSlowdown : seconds;
}

class ServerProcess {
 public:
  // Starts `binary` with `args` plus loopback/ephemeral-port flags; waits until it serves.
  ServerProcess(const std::string& binary, std::vector<std::string> args);
  ~ServerProcess();

  bool started() const { return grpc_port_ > 0; }
  pid_t pid() const { return pid_; }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  int admin_port() const { return admin_port_; }  // -1 without --admin_port
  std::string grpc_target() const;
  // The --port_file the server wrote its bound ports to ({"grpc_port": .., "http_port": ..}).
  std::string port_file() const { return dir_ + "/ports.json"; }
  void SendSignal(int signal) const;
  // Waits for exit (up to `timeout_seconds`); returns the exit code, or -1 on timeout/crash.
  // A server that exited while starting reports that exit code.
  int WaitForExit(double timeout_seconds);
  // Everything the server logged so far.
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int http_port_ = 0;
  int admin_port_ = -1;
  int exit_code_ = -1;
  std::string dir_;
};

// A model directory written at test time by a Python script (`/usr/bin/python3 SCRIPT DIR`, the
// script's absolute path) into a fresh temporary directory, removed when this object goes away.
// ok() is false (and error() says why) when the script failed.
class GeneratedModel {
 public:
  explicit GeneratedModel(const std::string& script);
  ~GeneratedModel();
  GeneratedModel(const GeneratedModel&) = delete;
  GeneratedModel& operator=(const GeneratedModel&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::string error_;
};

}  // namespace abcd::testing
