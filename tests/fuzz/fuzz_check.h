// A check for libFuzzer targets: a broken invariant aborts with a message, which libFuzzer
// reports as a finding (with the input that caused it). Not for production code.
#pragma once

#include <cstdio>
#include <cstdlib>

#define ABCD_FUZZ_CHECK(condition)                                                       \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
