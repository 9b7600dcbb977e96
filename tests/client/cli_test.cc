#include "client/cli.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

TEST(ClosestMatchTest, NamesTheNearestWord) {
  EXPECT_EQ(ClosestMatch("fitt", {"fit", "gpus", "models"}), "fit");
  EXPECT_EQ(ClosestMatch("zzzzzz", {"fit", "gpus"}), "");
}

}  // namespace
}  // namespace headroom::cli
