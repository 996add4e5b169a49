// Whole-file reads for tests: fixtures, templates, files a binary under test wrote.
// Thread-safe.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace abcd::testing {

// The bytes of `path`; empty when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace abcd::testing
