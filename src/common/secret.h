// Secrets in HTTP requests: API keys checked in time that does not tell how much of a guess was
// right, and the Authorization header's Bearer form (shared by the server and the router).
#pragma once

#include <cctype>
#include <string_view>

namespace sluice {

// Equal-time comparison: the time taken depends on the lengths only, not on where the first
// difference is.
inline bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Whether an Authorization header is "Bearer KEY" with this key. The scheme is case-insensitive
// (RFC 9110, section 11.1); the token follows one or more spaces.
inline bool bearer_is(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kBearer = "bearer";
  const size_t space = authorization.find(' ');
  if (space != kBearer.size()) return false;
  for (size_t i = 0; i < space; ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return false;
  }
  const size_t token = authorization.find_first_not_of(' ', space);
  return token != std::string_view::npos && same_secret(authorization.substr(token), key);
}

}  // namespace sluice
