// SLUICE_RETURN_IF_ERROR / SLUICE_ASSIGN_OR_RETURN (common/status.h) return
// std::unexpected, which only a Result<T> function can; these two do the same in functions
// that return a plain Status.
#pragma once

#include "common/status.h"

#define SLUICE_CHAT_RETURN_IF_ERROR(expr)            \
  do {                                               \
    ::sluice::Status sluice_chat_status_ = (expr);   \
    if (!sluice_chat_status_.is_ok()) return sluice_chat_status_; \
  } while (0)
#define SLUICE_CHAT_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_CHAT_ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_chat_result_, __LINE__), lhs, expr)
#define SLUICE_CHAT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                       \
  if (!tmp.has_value()) return std::move(tmp).error();     \
  lhs = std::move(tmp).value()
