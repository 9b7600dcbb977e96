// The energy plot page (server/service/pages/energy_plot.h) drawn from the
// shipped curves.

#include "server/service/pages/energy_plot.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/energy/energy_curves.h"
#include "server/io/files.h"
#include "tests/support/shipped_energy_curves.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const v1::EnergyCurveSet& Shipped() { return testing::ShippedEnergyCurves(); }

TEST(EnergyPlotTest, DrawsCurveBandAnchorsAndCrossover) {
  absl::StatusOr<std::string> svg = EnergyPlotSvg(Shipped(), "turing");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_THAT(*svg, HasSubstr("<svg xmlns="));
  EXPECT_THAT(*svg, HasSubstr("Turing (T4)"));
  EXPECT_THAT(*svg, HasSubstr("crossover 2.13 B"));
  EXPECT_THAT(*svg, HasSubstr("<polygon"));
  int circles = 0;
  for (size_t at = svg->find("<circle"); at != std::string::npos;
       at = svg->find("<circle", at + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 4);

  absl::StatusOr<std::string> hopper = EnergyPlotSvg(Shipped(), "hopper");
  ASSERT_TRUE(hopper.ok());
  EXPECT_THAT(*hopper, HasSubstr("borrowed from ampere"));
  EXPECT_THAT(*hopper, HasSubstr("INT8"));
  EXPECT_EQ(EnergyPlotSvg(Shipped(), "volta").status().message(),
            "arch 'volta' is not known; allowed: ada, ampere, blackwell, "
            "hopper, turing");
}

}  // namespace
}  // namespace headroom
