#include "common/secret.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Secret, SameSecretNeedsEveryByteAndTheLength) {
  EXPECT_TRUE(same_secret("sesame", "sesame"));
  EXPECT_TRUE(same_secret("", ""));
  EXPECT_FALSE(same_secret("sesame", "sesamE"));
  EXPECT_FALSE(same_secret("sesame", "sesam"));
  EXPECT_FALSE(same_secret("sesam", "sesame"));
  EXPECT_FALSE(same_secret("", "x"));
}

TEST(Secret, BearerSchemeIsCaseInsensitiveAndTheKeyIsNot) {
  EXPECT_TRUE(bearer_is("Bearer k1", "k1"));
  EXPECT_TRUE(bearer_is("bearer k1", "k1"));
  EXPECT_TRUE(bearer_is("BEARER   k1", "k1"));
  EXPECT_FALSE(bearer_is("Bearer K1", "k1"));
  EXPECT_FALSE(bearer_is("Bearer k1 ", "k1"));
  EXPECT_FALSE(bearer_is("Bearerk1", "k1"));
  EXPECT_FALSE(bearer_is("Basic k1", "k1"));
  EXPECT_FALSE(bearer_is("Bearer ", ""));
  EXPECT_FALSE(bearer_is("", "k1"));
  EXPECT_FALSE(bearer_is("k1", "k1"));
}

}  // namespace
}  // namespace sluice
