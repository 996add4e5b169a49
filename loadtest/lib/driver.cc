#include "loadtest/lib/driver.h"

#include <array>
#include <utility>

namespace abcd::loadtest {
namespace {

constexpr std::array<std::pair<Endpoint, absl::string_view>, 5> kNames = {{
    {Endpoint::kGrpcGenerate, "grpc-generate"},
    {Endpoint::kGrpcTranslate, "grpc-translate"},
    {Endpoint::kHttpCompletions, "http-completions"},
    {Endpoint::kHttpTranslate, "http-translate"},
    {Endpoint::kInProcess, "in-process"},
}};

}  // namespace

absl::string_view EndpointName(Endpoint endpoint) {
  for (const auto& [e, name] : kNames) {
    if (e == endpoint) return name;
  }
  return "unknown";
}

bool ParseEndpoint(absl::string_view name, Endpoint* endpoint) {
  for (const auto& [e, n] : kNames) {
    if (n == name) {
      *endpoint = e;
      return true;
    }
  }
  return false;
}

bool IsStreaming(Endpoint endpoint) {
  return endpoint == Endpoint::kGrpcGenerate || endpoint == Endpoint::kHttpCompletions ||
         endpoint == Endpoint::kInProcess;
}

}  // namespace abcd::loadtest
