#include "base/input_limits.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(EchoTest, KeepsShortValuesAndCutsLongOnesSayingTheirSize) {
  EXPECT_EQ(Echo("fs-2"), "fs-2");
  const std::string exact(kMaxEchoChars, 'a');
  EXPECT_EQ(Echo(exact), exact);
  const std::string huge(1 << 20, 'b');
  EXPECT_EQ(Echo(huge),
            std::string(kMaxEchoChars, 'b') + "\xE2\x80\xA6(1048576 bytes)");
}

TEST(EchoTest, NeverSplitsAUtf8Character) {
  // 199 ASCII bytes, then a 2-byte character across the cut.
  const std::string value = std::string(199, 'a') + "\xC3\xA9" + "zzz";
  EXPECT_EQ(Echo(value), std::string(199, 'a') + "\xE2\x80\xA6(204 bytes)");
}

TEST(CheckLengthTest, NamesTheFieldTheSizeAndTheLimit) {
  EXPECT_TRUE(CheckLength("abc", "runs[0].id", 3).ok());
  const absl::Status status =
      CheckLength(std::string(5000, 'x'), "runs[0].id", kMaxNameChars);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("runs[0].id is 5000 bytes; allowed up to 256"));
  EXPECT_LT(status.message().size(), 300u);
}

}  // namespace
}  // namespace headroom
