#include "loadtest/lib/host_check.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace abcd::loadtest {

absl::StatusOr<std::string> LoopbackAddress(const std::string& host) {
  std::string address = host;
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);
  }
  if (absl::AsciiStrToLower(address) == "localhost") return std::string("127.0.0.1");
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    if ((ntohl(v4.s_addr) >> 24) == 127) return address;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return address;
    if (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127) return address;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("refusing to load-test \"", host,
                   "\": only loopback targets are allowed (127.0.0.0/8, ::1 or localhost)"));
}

}  // namespace abcd::loadtest
