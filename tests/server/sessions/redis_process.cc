#include "tests/server/sessions/redis_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace abcd::testing {
namespace {

std::string RedisBinary() {
  const char* env = std::getenv("ABCD_REDIS_SERVER");
  return env != nullptr && env[0] != '\0' ? env : "/usr/bin/redis-server";
}

// Sends `request` to 127.0.0.1:port and returns the first line of the reply ("" if none
// within `timeout_ms`).
std::string Exchange(int port, const std::string& request, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    pollfd p{fd, POLLIN, 0};
    char buffer[256];
    while (reply.find("\r\n") == std::string::npos && poll(&p, 1, timeout_ms) == 1) {
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      reply.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t end = reply.find("\r\n");
  return end == std::string::npos ? "" : reply.substr(0, end);
}

// True when 127.0.0.1:port answers "PING" with "+PONG" within ~200 ms.
bool Pings(int port) { return Exchange(port, "PING\r\n", 200) == "+PONG"; }

}  // namespace

int RedisProcess::FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

RedisProcess::RedisProcess() {
  char pattern[] = "/tmp/abcd-redis-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    error_ = std::string("mkdtemp: ") + std::strerror(errno);
    return;
  }
  dir_ = pattern;
  // Another process may take the port between FreePort() and redis' bind: try a few.
  for (int attempt = 0; attempt < 5 && !started(); ++attempt) Start(FreePort());
}

RedisProcess::~RedisProcess() {
  Resume();
  Kill();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string RedisProcess::url(int db) const {
  return "redis://127.0.0.1:" + std::to_string(port_) + "/" + std::to_string(db);
}

bool RedisProcess::Start(int port) {
  if (port <= 0) {
    error_ = "no free port";
    return false;
  }
  const std::string binary = RedisBinary();
  if (access(binary.c_str(), X_OK) != 0) {
    error_ = binary + " not found (install Debian's redis-server, or set ABCD_REDIS_SERVER)";
    return false;
  }
  port_ = port;
  std::vector<std::string> args = {
      binary,   "--port",    std::to_string(port), "--bind",      "127.0.0.1",
      "--save", "",          "--appendonly",       "no",          "--dir",
      dir_,     "--logfile", dir_ + "/redis.log",  "--daemonize", "no"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    error_ = std::string("fork: ") + std::strerror(errno);
    return false;
  }
  for (int i = 0; i < 500; ++i) {  // up to ~10 s on a loaded machine
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      error_ = "redis-server exited while starting on port " + std::to_string(port) +
               " (see its log in " + dir_ + ")";
      return false;
    }
    if (Pings(port)) {
      pid_ = pid;
      error_.clear();
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  error_ = "redis-server did not answer PING on port " + std::to_string(port);
  return false;
}

std::string RedisProcess::Command(const std::vector<std::string>& args) const {
  std::string request = absl::StrCat("*", args.size(), "\r\n");
  for (const std::string& arg : args)
    absl::StrAppend(&request, "$", arg.size(), "\r\n", arg, "\r\n");
  return Exchange(port_, request, 2000);
}

void RedisProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

bool RedisProcess::Restart() {
  Kill();
  return Start(port_);
}

void RedisProcess::Pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisProcess::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

}  // namespace abcd::testing
