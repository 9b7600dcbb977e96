#include "base/units.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(BytesToGbTest, GbIsTenToTheNineBytes) {
  EXPECT_EQ(BytesToGb(80e9), 80.0);
  EXPECT_EQ(BytesToGb(1.5e9), 1.5);
  EXPECT_EQ(BytesToGb(0), 0.0);
}

TEST(FormatGbTest, WritesExactlyTheDecimalsAsked) {
  // The extender's reasons (one decimal) and calibration's left-out lines
  // (two decimals) read these.
  EXPECT_EQ(FormatGb(79.6, 1), "79.6 GB");
  EXPECT_EQ(FormatGb(80, 1), "80.0 GB");
  EXPECT_EQ(FormatGb(23.99, 1), "24.0 GB");
  EXPECT_EQ(FormatGb(12.345678, 2), "12.35 GB");
  EXPECT_EQ(FormatGb(0.5, 2), "0.50 GB");
  EXPECT_EQ(FormatGb(7.25, 0), "7 GB");
}

TEST(FormatBytesAsGbTest, RoundsToTheDecimalsAndDropsTrailingZeros) {
  EXPECT_EQ(FormatBytesAsGb(12.3456e9, 2), "12.35 GB");
  EXPECT_EQ(FormatBytesAsGb(12.5e9, 2), "12.5 GB");
  EXPECT_EQ(FormatBytesAsGb(12e9, 2), "12 GB");
  EXPECT_EQ(FormatBytesAsGb(4e6, 2), "0 GB");
  EXPECT_EQ(FormatBytesAsGb(5e6, 2), "0.01 GB");  // half away from zero
  EXPECT_EQ(FormatBytesAsGb(1.25e9, 1), "1.3 GB");
  // At most six significant digits, as absl::StrCat writes a double.
  EXPECT_EQ(FormatBytesAsGb(123456.78e9, 2), "123457 GB");
}

TEST(FormatBytesAsGbTest, MatchesTheHandWrittenFormOfEveryCaller) {
  // What training_setup.cc and parallel.cc wrote before the one formatter:
  // round(bytes / 1e7) / 100.
  for (double bytes : {0.0, 1.0, 4999999.0, 5e6, 1.234e9, 13.48e9, 80e9,
                       2.0 / 3.0 * 1e10, 7.123456789e11}) {
    EXPECT_EQ(FormatBytesAsGb(bytes, 2),
              absl::StrCat(std::round(bytes / 1e7) / 100, " GB"))
        << bytes;
  }
}

}  // namespace
}  // namespace headroom
