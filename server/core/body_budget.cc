#include "server/core/body_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace abcd {

BodyBudget::BodyBudget(int64_t capacity_bytes, int64_t small_body_bytes)
    : capacity_(capacity_bytes), small_body_bytes_(small_body_bytes) {}

BodyBudget::Charge::Charge(Charge&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

BodyBudget::Charge& BodyBudget::Charge::operator=(Charge&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void BodyBudget::Charge::Release() {
  if (budget_ != nullptr && bytes_ > 0) budget_->used_.fetch_sub(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

int64_t BodyBudget::LimitFor(int64_t body_bytes) const {
  return capacity_ <= 0                    ? INT64_MAX
         : body_bytes <= small_body_bytes_ ? capacity_
                                           : capacity_ / 4 * 3;
}

// Adds `bytes` to what is used when it fits under the limit for a body of `body_bytes`.
bool BodyBudget::TryAdd(int64_t bytes, int64_t body_bytes, absl::string_view protocol) {
  const int64_t limit = LimitFor(body_bytes);
  int64_t used = used_.load();
  do {
    if (body_bytes > limit || used > limit - bytes) {
      (protocol == "grpc" ? refused_grpc_ : refused_http_).fetch_add(1);
      return false;
    }
  } while (!used_.compare_exchange_weak(used, used + bytes));
  return true;
}

bool BodyBudget::TryCharge(int64_t bytes, absl::string_view protocol, Charge* charge) {
  charge->Release();
  if (bytes <= 0) return true;
  if (!TryAdd(bytes, bytes, protocol)) return false;
  charge->budget_ = this;
  charge->bytes_ = bytes;
  return true;
}

bool BodyBudget::TryResize(int64_t bytes, absl::string_view protocol, Charge* charge) {
  if (charge->budget_ != this) charge->Release();  // held on another budget (or nothing)
  bytes = std::max<int64_t>(bytes, 0);
  const int64_t delta = bytes - charge->bytes_;
  if (delta > 0 && !TryAdd(delta, bytes, protocol)) return false;
  if (delta < 0) used_.fetch_sub(-delta);
  charge->budget_ = bytes > 0 ? this : nullptr;
  charge->bytes_ = bytes;
  return true;
}

std::string BodyBudget::RefusalMessage(int64_t bytes) const {
  return absl::StrCat("request bodies in flight would exceed --max_inflight_body_mb (",
                      capacity_ >> 20, " MiB; ", used() >> 20, " MiB held, this one ", bytes,
                      " bytes); retry later");
}

}  // namespace abcd
