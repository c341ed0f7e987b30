// Status and Result<T>: expected failures as values at every module boundary.
//
// A Status is either ok or carries a message a user can act on. Result<T> is
// std::expected<T, Status>. Programmer errors are not Statuses: use SLUICE_CHECK.
#pragma once

#include <expected>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace sluice {

// What kind of failure, for callers that answer differently (an HTTP status, a retry).
enum class StatusCode {
  kOk,
  kError,        // anything a caller cannot act on by kind: a corrupt file, an internal failure
  kInvalid,      // the request itself is wrong (a bad parameter, a prompt over the context)
  kOverloaded,   // refused for now because a bounded queue is full; retrying later may work
  kUnavailable,  // refused because the component is shutting down
  kUnsupported,  // well formed, but asks for what this component does not do (another API)
};

class Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message, StatusCode code = StatusCode::kError) {
    return Status(std::move(message), code);
  }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this status with `context: ` put in front of its message.
  Status with_context(std::string_view context) const {
    if (is_ok()) return *this;
    return Status(fmt::format("{}: {}", context, message_), code_);
  }

 private:
  Status(std::string message, StatusCode code) : message_(std::move(message)), code_(code) {}
  std::string message_;
  StatusCode code_ = StatusCode::kOk;
};

template <typename T>
using Result = std::expected<T, Status>;

// Error(...) builds the unexpected value of a Result from a format string.
template <typename... Args>
std::unexpected<Status> Error(fmt::format_string<Args...> format, Args&&... args) {
  return std::unexpected(Status::error(fmt::format(format, std::forward<Args>(args)...)));
}
inline std::unexpected<Status> Error(Status status) { return std::unexpected(std::move(status)); }
// The same with a code other than kError.
template <typename... Args>
std::unexpected<Status> Error(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
  return std::unexpected(Status::error(fmt::format(format, std::forward<Args>(args)...), code));
}

}  // namespace sluice

// Returns early from the enclosing function when `expr` (a Status) failed.
#define SLUICE_RETURN_IF_ERROR(expr)                                    \
  do {                                                                  \
    ::sluice::Status sluice_status_ = (expr);                           \
    if (!sluice_status_.is_ok()) return std::unexpected(sluice_status_); \
  } while (0)

#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

// SLUICE_ASSIGN_OR_RETURN(auto x, make_x()): unwraps a Result or returns its error.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_result_, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.has_value()) return std::unexpected(std::move(tmp).error()); \
  lhs = std::move(tmp).value()
