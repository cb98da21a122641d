// Early-return helpers for absl::Status / absl::StatusOr, as in Google's internal code base.
//
//   LLMSERVE_RETURN_IF_ERROR(DoThing());
//   LLMSERVE_ASSIGN_OR_RETURN(existing_variable, ComputeThing());
//
// ASSIGN_OR_RETURN assigns to a variable declared beforehand; it works in any function returning
// absl::Status or absl::StatusOr<T>.

#ifndef LLMSERVE_COMMON_STATUS_STATUS_MACROS_H_
#define LLMSERVE_COMMON_STATUS_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LLMSERVE_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    const ::absl::Status llmserve_status_ = (expr);      \
    if (!llmserve_status_.ok()) return llmserve_status_; \
  } while (0)

#define LLMSERVE_ASSIGN_OR_RETURN(lhs, expr)                          \
  do {                                                                \
    auto llmserve_statusor_ = (expr);                                 \
    if (!llmserve_statusor_.ok()) return llmserve_statusor_.status(); \
    lhs = *std::move(llmserve_statusor_);                             \
  } while (0)

#endif  // LLMSERVE_COMMON_STATUS_STATUS_MACROS_H_
