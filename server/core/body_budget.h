// One process-wide byte budget for request bodies in flight (--max_inflight_body_mb), shared by
// the HTTP and gRPC frontends so that no set of clients can make the server buffer more than
// `capacity` bytes of request bodies at once, however many connections they open.
//
// A body is charged before it is buffered: HTTP charges a request's Content-Length when its
// header has been read, gRPC charges a message's size when the call starts, and a streamed
// session import grows its charge (TryResize) with the buffer it holds, before each growth, so
// an upload that stalls holds only what it has sent. A charge that does not
// fit is refused at once (HTTP 503 + Retry-After, gRPC RESOURCE_EXHAUSTED) and counted. Bodies
// larger than `small_body_bytes` may use at most 3/4 of the capacity, so completions (small
// bodies) are still admitted while large uploads hold the rest. Charges are released when the
// body is no longer held (Charge's destructor).
//
// Thread-safety: every method may be called from any thread (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace abcd {

class BodyBudget {
 public:
  // capacity_bytes <= 0: unlimited (nothing is refused; bytes are still counted).
  BodyBudget(int64_t capacity_bytes, int64_t small_body_bytes);
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  // Bytes held by a charge until it is released, destroyed or moved from.
  class Charge {
   public:
    Charge() = default;
    ~Charge() { Release(); }
    Charge(Charge&& other) noexcept;
    Charge& operator=(Charge&& other) noexcept;
    void Release();
    int64_t bytes() const { return bytes_; }

   private:
    friend class BodyBudget;
    BodyBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Charges `bytes` (the charge replaces what `charge` held): false, and a refusal counted for
  // `protocol` ("http" or "grpc"), when it does not fit; `charge` then holds nothing.
  bool TryCharge(int64_t bytes, absl::string_view protocol, Charge* charge);
  // Makes `charge` hold `bytes` in all, charging or releasing only the difference: shrinking
  // always succeeds; growing is refused (false, counted for `protocol`) when the difference does
  // not fit under the limit for a body of `bytes`, and `charge` then keeps what it held.
  bool TryResize(int64_t bytes, absl::string_view protocol, Charge* charge);

  int64_t capacity() const { return capacity_; }
  // The most a body of `body_bytes` may hold with nothing else charged (INT64_MAX: unlimited).
  int64_t LimitFor(int64_t body_bytes) const;
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t refused_http() const { return refused_http_.load(std::memory_order_relaxed); }
  int64_t refused_grpc() const { return refused_grpc_.load(std::memory_order_relaxed); }
  // The refusal message, naming the flag.
  std::string RefusalMessage(int64_t bytes) const;

 private:
  bool TryAdd(int64_t bytes, int64_t body_bytes, absl::string_view protocol);

  const int64_t capacity_;
  const int64_t small_body_bytes_;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> refused_http_{0};
  std::atomic<int64_t> refused_grpc_{0};
};

}  // namespace abcd
