// Small macros for propagating absl::Status and absl::StatusOr.
#ifndef HEADROOM_UTIL_STATUS_MACROS_H_
#define HEADROOM_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HEADROOM_CONCAT_INNER_(a, b) a##b
#define HEADROOM_CONCAT_(a, b) HEADROOM_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status headroom_status_ = (expr);        \
    if (!headroom_status_.ok()) return headroom_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else assigns the
// value to `lhs` (which may be a declaration, e.g. `auto x`).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(HEADROOM_CONCAT_(headroom_statusor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // HEADROOM_UTIL_STATUS_MACROS_H_
