// SLUICE_CHECK: programmer errors abort with a message. User input must never reach one.
//
//   SLUICE_CHECK(n > 0) << "n=" << n;
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>

namespace sluice::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace sluice::internal

#define SLUICE_CHECK(cond)                   \
  (cond) ? (void)0                           \
         : ::sluice::internal::Voidify() &   \
               ::sluice::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()
