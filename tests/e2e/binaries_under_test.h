// The binaries an e2e test starts: this build's own (ABCD_SERVER, ABCD_CLI and ABCD_CLIENT,
// defined by tests/CMakeLists.txt for this file only), unless the environment names others:
// ABCD_E2E_SERVER, ABCD_E2E_CLI, ABCD_E2E_CLIENT (the sanitizer stage of setup.sh points them at
// its ASan/UBSan builds of abcd-server, abcd-cli and abcd-client). Thread-safe.
#pragma once

#include <string>

namespace abcd::testing {

std::string ServerBinary();
std::string CliBinary();
std::string ClientBinary();

}  // namespace abcd::testing
