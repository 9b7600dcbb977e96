// Measured points for the energy picture: quantized runs against their
// fp16 partner, and the anchors refits added.

#include "core/energy/energy_points.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

EnergyRunRecord Record(const std::string& quant, double energy_j,
                       const std::string& worker) {
  EnergyRunRecord r;
  r.run.set_model("m7");
  r.run.set_params_b(7);
  r.run.set_gpu("L4");
  r.run.set_quant(quant);
  r.run.set_tokens_generated(1000);
  r.run.set_energy_j(energy_j);
  r.run.set_idle_w(10);
  r.run.set_window_s(2);
  r.worker = worker;
  r.date_unix = 1764547200;  // 2025-12-01
  return r;
}

TEST(EnergyPointsTest, QuantizedRunsAgainstTheirFp16) {
  const std::vector<MeasuredEnergyPoint> points =
      PointsFromEnergyRuns({Record("fp16", 100, "a"), Record("fp16", 120, "a"),
                            Record("nf4", 132, "a"), Record("int8", 90, "b")},
                           false);
  // Worker b has no fp16 run: no point.
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].arch, "ada");
  EXPECT_EQ(points[0].quant, "NF4");
  EXPECT_EQ(points[0].worker, "a");
  EXPECT_EQ(points[0].date_unix, 1764547200);
  EXPECT_NEAR(points[0].de_pct, 20.0, 1e-9);  // 132 / 110 - 1
  // Idle subtracted: (132 - 20) / (110 - 20) - 1.
  const std::vector<MeasuredEnergyPoint> net =
      PointsFromEnergyRuns({Record("fp16", 100, "a"), Record("fp16", 120, "a"),
                            Record("nf4", 132, "a")},
                           true);
  ASSERT_EQ(net.size(), 1u);
  EXPECT_NEAR(net[0].de_pct, 100.0 * (112.0 / 90.0 - 1), 1e-9);
}

TEST(EnergyPointsTest, OnlyTheAnchorsRefitsAdded) {
  v1::EnergyCurveSet shipped;
  shipped.set_version("ec-1");
  v1::EnergyAnchor* a =
      (*shipped.mutable_curves())["ada"].mutable_nf4()->add_anchors();
  a->set_n(1);
  a->set_de(5);
  a->set_model("old");
  v1::EnergyCurveSet refit = shipped;
  refit.set_version("ec-2");
  refit.set_created_unix(1764547200);
  v1::EnergyAnchor* added =
      (*refit.mutable_curves())["ada"].mutable_int8()->add_anchors();
  added->set_n(3);
  added->set_de(-4);
  added->set_model("new");
  const std::vector<MeasuredEnergyPoint> points =
      PointsFromCurveSets({shipped, refit, refit}, shipped);
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].model, "new");
  EXPECT_EQ(points[0].quant, "INT8");
  EXPECT_EQ(points[0].worker, "refit ec-2");
  EXPECT_EQ(points[0].params_b, 3);
  EXPECT_EQ(points[0].de_pct, -4);
}

}  // namespace
}  // namespace headroom
