#ifndef HEADROOM_BASE_STATUS_MACROS_H_
#define HEADROOM_BASE_STATUS_MACROS_H_

// Abseil 20220623 ships no status macros; these are the project's only ones.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HEADROOM_CONCAT_INNER_(a, b) a##b
#define HEADROOM_CONCAT_(a, b) HEADROOM_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    const ::absl::Status _headroom_st = (expr);  \
    if (!_headroom_st.ok()) return _headroom_st; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise moves the value into `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL_(HEADROOM_CONCAT_(_headroom_sor_, __LINE__), lhs, rexpr)

#define ASSIGN_OR_RETURN_IMPL_(sor, lhs, rexpr) \
  auto sor = (rexpr);                           \
  if (!sor.ok()) return sor.status();           \
  lhs = std::move(sor).value()

#endif  // HEADROOM_BASE_STATUS_MACROS_H_
