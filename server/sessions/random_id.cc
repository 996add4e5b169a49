#include "server/sessions/random_id.h"

#include <sys/random.h>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"

namespace abcd {

std::string RandomHex128() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    // Blocks only before the kernel's pool is first initialised (early boot); EINTR retries.
    // getrandom cannot otherwise fail for 16 bytes with flags 0 on Linux >= 3.17.
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace abcd
