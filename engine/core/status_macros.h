// Early-return helpers for absl::Status / absl::StatusOr, used across the engine.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ABCD_CONCAT_INNER(a, b) a##b
#define ABCD_CONCAT(a, b) ABCD_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define ABCD_RETURN_IF_ERROR(expr)                                \
  do {                                                            \
    if (absl::Status abcd_status_ = (expr); !abcd_status_.ok()) { \
      return abcd_status_;                                        \
    }                                                             \
  } while (0)

// `ABCD_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define ABCD_ASSIGN_OR_RETURN(lhs, expr) \
  ABCD_ASSIGN_OR_RETURN_IMPL(ABCD_CONCAT(abcd_statusor_, __LINE__), lhs, expr)
#define ABCD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
