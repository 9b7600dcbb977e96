#include "core/calibration/kind_bounds.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(KindBoundsTest, SetupKinds) {
  v1::TrainingSetup setup;
  EXPECT_EQ(SetupKind(setup), "1gpu/full");
  setup.mutable_lora()->set_rank(8);
  EXPECT_EQ(SetupKind(setup), "1gpu/lora");
  setup.set_quant_base(v1::TrainingSetup::NF4);
  EXPECT_EQ(SetupKind(setup), "1gpu/qlora");
  setup.set_gpus(2);
  setup.set_parallel(v1::TrainingSetup::FSDP_FULL);
  setup.set_offload(v1::TrainingSetup::OPTIMIZER);
  EXPECT_EQ(SetupKind(setup), "multi/fsdp-full/qlora+offload");
}

KindObservation Obs(const std::string& kind, const std::string& pub,
                    double predicted, std::optional<double> measured,
                    v1::MemoryMetric metric = v1::ALLOCATED, double card = 0) {
  KindObservation o;
  o.kind = kind;
  o.publication = pub;
  o.metric = metric;
  o.predicted_gb = predicted;
  o.device_gb = predicted;
  o.measured_gb = measured;
  o.card_gb = card;
  return o;
}

// Eight allocated rows of "1gpu/lora" with ratios 1.0 .. 1.7, two per
// publication p0..p3: k95 is the ratio at index ceil(0.95 x 7) = 7, 1.7.
// Held out, p3 (1.3, 1.7) is judged by the other six (k 1.6): 1.7 is not
// covered; every other row is (k 1.7): 7 of 8. Two rows of
// "multi/ddp/full" are too few: the widest k (1.7), said.
TEST(KindBoundsTest, KPerKindHeldOutByPublicationAndWidestForFew) {
  std::vector<KindObservation> obs;
  for (int i = 0; i < 8; ++i) {
    obs.push_back(Obs("1gpu/lora", "p" + std::to_string(i % 4), 10,
                      10 * (1.0 + 0.1 * i)));
  }
  obs.push_back(Obs("multi/ddp/full", "q", 10, 11));
  obs.push_back(Obs("multi/ddp/full", "q", 10, 12));
  const std::vector<v1::SetupKindBound> bounds = KindBounds(obs, {"1gpu/full"});
  ASSERT_EQ(bounds.size(), 3u);
  EXPECT_EQ(bounds[0].kind(), "1gpu/full");  // measured only: the prior's
  EXPECT_EQ(bounds[0].k_allocated(), 0);
  const v1::SetupKindBound& lora = bounds[1];
  EXPECT_EQ(lora.kind(), "1gpu/lora");
  EXPECT_DOUBLE_EQ(lora.k_allocated(), 1.7);
  EXPECT_FALSE(lora.widest());
  EXPECT_EQ(lora.measurements(), 8);
  EXPECT_EQ(lora.publications(), 4);
  EXPECT_EQ(lora.covered(), 7);
  const v1::SetupKindBound& ddp = bounds[2];
  EXPECT_TRUE(ddp.widest());
  EXPECT_DOUBLE_EQ(ddp.k_device(), 1.7);
  EXPECT_NE(ddp.note().find("widest"), std::string::npos);
}

// An OOM row counts as card / predicted device (a lower bound of its
// ratio), and the page counts a held-out bound that would call it FITS.
TEST(KindBoundsTest, OomRowsWidenAndAreCounted) {
  std::vector<KindObservation> obs;
  for (int i = 0; i < 5; ++i) {
    obs.push_back(Obs("1gpu/qlora", "a", 10, 10.5, v1::DEVICE));
  }
  obs.push_back(Obs("1gpu/qlora", "b", 10, std::nullopt, v1::DEVICE, 40));
  const std::vector<v1::SetupKindBound> bounds = KindBounds(obs, {});
  ASSERT_EQ(bounds.size(), 1u);
  EXPECT_DOUBLE_EQ(bounds[0].k_device(), 4.0);  // 40 / 10
  EXPECT_EQ(bounds[0].oom_rows(), 1);
  // Without b, k = 1.05: 10 x 1.05 x 1.15 <= 40 says FITS: counted.
  EXPECT_EQ(bounds[0].said_fits_but_oom(), 1);
}

TEST(KindBoundsTest, UnlistedKindIsUntestedWithTheWidestK) {
  google::protobuf::RepeatedPtrField<v1::SetupKindBound> bounds;
  v1::SetupKindBound* a = bounds.Add();
  a->set_kind("1gpu/full");
  a->set_k_allocated(1.3);
  a->set_k_reserved(1.4);
  a->set_k_device(1.6);
  const auto found = BoundFor(bounds, "1gpu/full");
  ASSERT_TRUE(found.has_value());
  EXPECT_FALSE(found->untested());
  const auto untested = BoundFor(bounds, "multi/zero3/lora");
  ASSERT_TRUE(untested.has_value());
  EXPECT_TRUE(untested->untested());
  EXPECT_DOUBLE_EQ(untested->k_device(), 1.6);
  EXPECT_FALSE(BoundFor({}, "1gpu/full").has_value());
  EXPECT_DOUBLE_EQ(KOf(*found, v1::UNSTATED), 1.6);
}

}  // namespace
}  // namespace headroom
