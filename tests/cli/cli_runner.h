// Runs the abcd-cli binary (ABCD_CLI) with a shell argument string for the CLI tests: its exit
// code and everything it wrote (stdout and stderr together). Not thread-safe (popen per call).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace abcd::testing {

struct CliResult {
  int exit_code;  // -1 when the process did not exit normally (a signal: a crash)
  std::string output;
};

inline CliResult RunCli(const std::string& args) {
  const std::string command = std::string(ABCD_CLI) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace abcd::testing
