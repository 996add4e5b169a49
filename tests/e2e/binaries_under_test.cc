#include "tests/e2e/binaries_under_test.h"

#include <cstdlib>

namespace abcd::testing {
namespace {

std::string FromEnvironmentOr(const char* variable, const char* built) {
  const char* value = std::getenv(variable);
  return value != nullptr && *value != '\0' ? value : built;
}

}  // namespace

std::string ServerBinary() { return FromEnvironmentOr("ABCD_E2E_SERVER", ABCD_SERVER); }
std::string CliBinary() { return FromEnvironmentOr("ABCD_E2E_CLI", ABCD_CLI); }
std::string ClientBinary() { return FromEnvironmentOr("ABCD_E2E_CLIENT", ABCD_CLIENT); }

}  // namespace abcd::testing
