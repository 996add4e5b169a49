#include "tests/e2e/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "nlohmann/json.hpp"

namespace abcd::testing {

ServerProcess::ServerProcess(const std::string& binary, std::vector<std::string> args) {
  char pattern[] = "/tmp/abcd-e2e-XXXXXX";
  dir_ = mkdtemp(pattern);
  const std::string port_file = this->port_file();
  args.insert(args.begin(), {binary, "--host", "127.0.0.1", "--grpc_port", "0", "--http_port", "0",
                             "--port_file", port_file});
  pid_ = fork();
  if (pid_ == 0) {
    const int log = open((dir_ + "/server.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(log, STDERR_FILENO);
    dup2(log, STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(port_file);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      const auto ports = nlohmann::json::parse(text.str(), nullptr, false);
      if (ports.is_object()) {
        grpc_port_ = ports.value("grpc_port", 0);
        http_port_ = ports.value("http_port", 0);
        admin_port_ = ports.value("admin_port", -1);
        return;
      }
    }
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string ServerProcess::grpc_target() const { return "127.0.0.1:" + std::to_string(grpc_port_); }

void ServerProcess::SendSignal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

int ServerProcess::WaitForExit(double timeout_seconds) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  if (pid_ <= 0) return exit_code_;
  while (pid_ > 0 && std::chrono::steady_clock::now() < end) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string ServerProcess::Log() const {
  std::ifstream in(dir_ + "/server.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool UnderSanitizers() { return std::getenv("ASAN_OPTIONS") != nullptr; }

GeneratedModel::GeneratedModel(const std::string& script) {
  char pattern[] = "/tmp/abcd-model-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    error_ = "mkdtemp failed";
    return;
  }
  dir_ = pattern;
  const std::string command = "/usr/bin/python3 " + script + " " + dir_;
  if (std::system(command.c_str()) != 0) error_ = command + " failed";
}

GeneratedModel::~GeneratedModel() {
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace abcd::testing
