// Put/Get latency of the session stores for blobs of a given size: the memory store and a
// Redis the tool starts on a free loopback port (tests/server/sessions/redis_process.h).
//
//   build/tests/session_store_bench [BYTES...]    (default: 270336 = abc-lm's 264 KiB, 4 MiB)
//
// Prints p50/p90 over 200 Put+Get pairs per store and size. Not run by ctest.
#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "server/sessions/session_store.h"
#include "tests/server/sessions/redis_process.h"

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  mallopt(M_MMAP_THRESHOLD, 1 << 20);  // as abcd-server (main.cc): big blocks mmap'ed apart
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    size_t size = 0;
    if (!absl::SimpleAtoi(argv[i], &size) || size == 0 || size > (size_t{256} << 20)) {
      std::fprintf(stderr, "usage: %s [BYTES...] (1 .. 256 MiB each)\n", argv[0]);
      return 2;
    }
    sizes.push_back(size);
  }
  if (sizes.empty()) sizes = {size_t{264} * 1024, size_t{4} << 20};
  abcd::testing::RedisProcess redis;
  if (!redis.started()) {
    std::fprintf(stderr, "%s\n", redis.error().c_str());
    return 1;
  }
  for (const std::string& spec : {std::string("memory"), redis.url()}) {
    abcd::SessionStoreOptions options;
    options.timeout = absl::Seconds(5);
    auto store = abcd::CreateSessionStore(spec, options);
    if (!store.ok()) return 1;
    for (size_t size : sizes) {
      const std::string blob(size, 'x');
      std::vector<double> put, get;
      for (int i = 0; i < 200; ++i) {
        const std::string id = "bench" + std::to_string(i % 16);
        std::string copy = blob;  // Put takes the blob by value; copy outside the timing
        absl::Time start = absl::Now();
        absl::Status s = (*store)->Put(id, std::move(copy));
        put.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
        start = absl::Now();
        if (s.ok()) s = (*store)->Get(id).status();
        get.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
      }
      std::sort(put.begin(), put.end());
      std::sort(get.begin(), get.end());
      std::printf("%-28s %9zu B  Put p50 %8.0f us p90 %8.0f us  Get p50 %8.0f us p90 %8.0f us\n",
                  spec.c_str(), size, put[100], put[180], get[100], get[180]);
    }
  }
  return 0;
}
