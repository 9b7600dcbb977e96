// The energy plot page (pages/energy_plot.h) drawn from the
// shipped curves.

#include "pages/energy_plot.h"

#include <string>

#include "core/energy/energy_curves.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/files.h"
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

// The shipped curves have none of Hopper's own (it borrows Ampere's): the
// page says there are no Hopper measurements rather than leaving it out;
// once points are measured it says how many wait for a refit.
TEST(EnergyPlotTest, ABorrowingArchitectureSaysItHasNoMeasurementsYet) {
  EXPECT_EQ(BorrowedCurveNotice(Shipped(), "hopper", {}),
            "no Hopper measurements yet (H100/H200): its answers use "
            "ampere's curves (borrowed)");
  MeasuredEnergyPoint point;
  point.arch = "hopper";
  point.quant = "NF4";
  EXPECT_EQ(BorrowedCurveNotice(Shipped(), "Hopper", {point, point}),
            "Hopper (H100/H200): 2 measured points but no curves of its own "
            "until a refit; its answers use ampere's curves (borrowed)");
  EXPECT_EQ(BorrowedCurveNotice(Shipped(), "ampere", {}), "");
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(EnergyPlotTest, MeasuredPointsByWorkerAndDate) {
  MeasuredEnergyPoint a;
  a.arch = "turing";
  a.quant = "NF4";
  a.model = "llama-7b";
  a.gpu = "T4";
  a.params_b = 7;
  a.de_pct = -12.5;
  a.worker = "gpu-node-1";
  a.date_unix = 1764547200;  // 2025-12-01
  MeasuredEnergyPoint b = a;
  b.params_b = 3;
  b.worker = "gpu-node-2";
  b.date_unix = 1764633600;  // 2025-12-02
  MeasuredEnergyPoint other_arch = a;
  other_arch.arch = "ampere";
  // Turing has no INT8 curve.
  MeasuredEnergyPoint no_curve = a;
  no_curve.quant = "INT8";
  const std::vector<MeasuredEnergyPoint> points = {a, b, other_arch, no_curve};
  absl::StatusOr<std::string> svg = EnergyPlotSvg(Shipped(), "turing", points);
  ASSERT_TRUE(svg.ok()) << svg.status();
  // Two drawn (the other architecture's and the unknown quantization's
  // are not), each titled with who measured it and when.
  EXPECT_EQ(Count(*svg, "class=\"measured\""), 2);
  EXPECT_EQ(CountDrawnPoints(Shipped(), "turing", points), 2);
  EXPECT_THAT(*svg, HasSubstr("llama-7b on T4 (NF4) by gpu-node-1, "
                              "2025-12-01: -12.50%"));
  EXPECT_THAT(*svg, HasSubstr("by gpu-node-2, 2025-12-02"));
  EXPECT_THAT(*svg, HasSubstr("measured (2)"));
  // One shape per worker: a square and a triangle.
  EXPECT_THAT(*svg, HasSubstr("<rect x="));
  EXPECT_THAT(*svg, HasSubstr(" l5,9 l-10,0 z"));
  // The anchors are still the four circles.
  EXPECT_EQ(Count(*svg, "<circle"), 4);
}

}  // namespace
}  // namespace headroom
