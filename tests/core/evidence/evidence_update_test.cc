// Evidence that grows by the run (issue 35 item 3): Evidence::WithRuns adds
// runs to their keys' groups under the calibration the evidence was built
// with, leaves the evidence it came from as it was, and says when a run can
// move the GPU constants.

#include <algorithm>
#include <memory>
#include <vector>

#include "core/calibration/calibrate.h"
#include "core/evidence/anchor.h"
#include "core/evidence/evidence.h"
#include "core/evidence/model_key.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

class EvidenceUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(kRoot + "/models");
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = *std::move(catalog);
    absl::StatusOr<std::vector<v1::MeasuredRun>> runs =
        LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
    ASSERT_TRUE(runs.ok()) << runs.status();
    runs_ = *std::move(runs);
    auto fitted = Calibrate(runs_, catalog_, FitOptions{}, "test");
    ASSERT_TRUE(fitted.ok()) << fitted.status();
    set_ = fitted->factor_set;
    priors_ = PriorsOf(set_);
  }

  ModelKey KeyOf(const std::string& name, const v1::TrainingSetup& setup) {
    return ModelKeyOf(**catalog_.Find(name), setup);
  }

  // The runs of `name` in the shipped file, in its order.
  std::vector<size_t> RunsOf(const std::string& name) const {
    std::vector<size_t> of;
    for (size_t i = 0; i < runs_.size(); ++i) {
      if (runs_[i].template_() == name) of.push_back(i);
    }
    return of;
  }

  ModelCatalog catalog_;
  std::vector<v1::MeasuredRun> runs_;
  v1::FactorSet set_;
  std::vector<Prior> priors_;
};

TEST_F(EvidenceUpdateTest, AddedRunsJoinTheirKeyUnderTheSameCalibration) {
  // bert-base's last two runs come later.
  const std::vector<size_t> bert = RunsOf("bert-base");
  ASSERT_GE(bert.size(), 4u);
  std::vector<v1::MeasuredRun> base, later;
  for (size_t i = 0; i < runs_.size(); ++i) {
    const bool late = i == bert[bert.size() - 1] || i == bert[bert.size() - 2];
    (late ? later : base).push_back(runs_[i]);
  }
  const std::shared_ptr<const Evidence> before =
      Evidence::Build(base, catalog_, priors_);
  EvidenceUpdate update;
  const std::shared_ptr<const Evidence> after =
      before->WithRuns(later, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_EQ(update.runs, 2u);
  EXPECT_EQ(update.anchors, 1u);
  EXPECT_EQ(after->run_count(), runs_.size());
  EXPECT_EQ(before->run_count(), runs_.size() - 2);
  EXPECT_EQ(after->groups(), before->groups());

  const ModelKey key = KeyOf("bert-base", CalibrationSetup());
  const Anchor* old = before->Find(key, v1::REFERENCE, false);
  const Anchor* now = after->Find(key, v1::REFERENCE, false);
  ASSERT_NE(old, nullptr);
  ASSERT_NE(now, nullptr);
  // The evidence it came from is as it was.
  EXPECT_EQ(old->group.runs.size(), bert.size() - 2);
  ASSERT_EQ(now->group.runs.size(), bert.size());
  // The added runs are the group's last two, held as stored.
  EXPECT_EQ(after->run(now->group.runs.back()).measured_peak_gb(),
            later.back().measured_peak_gb());
  // Its correction is the group's fit under the calibration it came with.
  std::vector<const v1::MeasuredRun*> group;
  for (size_t i : now->group.runs) group.push_back(&after->run(i));
  const Correction expected = FitCorrection(
      now->group.shape, group, before->calibration().gpu_constant_gb,
      before->calibration().shrinkage, AnchorOptions{});
  EXPECT_DOUBLE_EQ(now->correction.fixed_scale, expected.fixed_scale);
  EXPECT_DOUBLE_EQ(now->correction.batch_scale, expected.batch_scale);
  EXPECT_EQ(&after->calibration(), &before->calibration());
  // The same group, basis figures included, as a rebuild of every run finds.
  const std::shared_ptr<const Evidence> rebuilt =
      Evidence::Build(runs_, catalog_, priors_);
  const Anchor* whole = rebuilt->Find(key, v1::REFERENCE, false);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(now->group.runs.size(), whole->group.runs.size());
  EXPECT_EQ(now->largest_batch, whole->largest_batch);
  EXPECT_EQ(now->min_batch, whole->min_batch);
  EXPECT_EQ(now->max_batch, whole->max_batch);
  EXPECT_EQ(now->oom_runs, whole->oom_runs);
  EXPECT_EQ(now->gpus, whole->gpus);
  EXPECT_EQ(rebuilt->groups(), after->groups());
}

TEST_F(EvidenceUpdateTest, ARunOfANewKeyMakesANewGroup) {
  const std::shared_ptr<const Evidence> before =
      Evidence::Build(runs_, catalog_, priors_);
  v1::TrainingSetup bf16 = CalibrationSetup();
  bf16.set_precision(v1::TrainingSetup::BF16_MIXED);
  const ModelKey key = KeyOf("bert-base", bf16);
  ASSERT_EQ(before->Find(key, v1::REFERENCE, false), nullptr);
  std::vector<v1::MeasuredRun> added(2, runs_[RunsOf("bert-base").front()]);
  for (size_t i = 0; i < added.size(); ++i) {
    *added[i].mutable_setup() = bf16;
    added[i].set_batch(8 * (i + 1));
    added[i].set_measured_peak_gb(3.0 + static_cast<double>(i));
  }
  EvidenceUpdate update;
  const std::shared_ptr<const Evidence> after =
      before->WithRuns(added, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_EQ(update.anchors, 1u);
  EXPECT_EQ(after->groups(), before->groups() + 1);
  const Anchor* anchor = after->Find(key, v1::REFERENCE, false);
  ASSERT_NE(anchor, nullptr);
  EXPECT_EQ(anchor->group.runs.size(), 2u);
  EXPECT_EQ(anchor->min_batch, 8u);
  EXPECT_EQ(anchor->max_batch, 16u);
  EXPECT_EQ(before->Find(key, v1::REFERENCE, false), nullptr);
  // A run of a template the catalog lacks is held but anchors nothing.
  v1::MeasuredRun unknown = added.front();
  unknown.set_template_("no-such-template");
  const std::shared_ptr<const Evidence> more =
      after->WithRuns({unknown}, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_EQ(update.runs, 1u);
  EXPECT_EQ(update.anchors, 0u);
  EXPECT_EQ(more->run_count(), after->run_count() + 1);
  EXPECT_EQ(more->groups(), after->groups());
}

TEST_F(EvidenceUpdateTest,
       OnlyARunAtAMeasuredBatchOnAnotherCardMovesConstants) {
  const std::shared_ptr<const Evidence> before =
      Evidence::Build(runs_, catalog_, priors_);
  const v1::MeasuredRun& measured = runs_[RunsOf("bert-base").front()];
  ASSERT_TRUE(measured.has_measured_peak_gb());
  EvidenceUpdate update;
  // The same card at a batch never measured: no cell.
  v1::MeasuredRun same_card = measured;
  same_card.set_batch(measured.batch() + 1);
  before->WithRuns({same_card}, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_FALSE(update.constants_moved);
  // Another card at a batch measured: a cell.
  v1::MeasuredRun other_card = measured;
  other_card.set_gpu(measured.gpu() == "H100" ? "L4" : "H100");
  before->WithRuns({other_card}, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_TRUE(update.constants_moved);
  // An OOM run there fits no constant.
  v1::MeasuredRun oom = other_card;
  oom.clear_measured_peak_gb();
  oom.set_oom_on_gb(24);
  before->WithRuns({oom}, catalog_, priors_, AnchorOptions{}, &update);
  EXPECT_FALSE(update.constants_moved);
}

// Runs are held in chunks shared between versions: evidence made from the
// same evidence twice keeps its own runs past the last full chunk.
TEST_F(EvidenceUpdateTest, VersionsMadeFromOneEvidenceKeepTheirOwnRuns) {
  std::vector<v1::MeasuredRun> many;
  while (many.size() < Evidence::kChunkRuns + 10) {
    many.insert(many.end(), runs_.begin(), runs_.end());
  }
  many.resize(Evidence::kChunkRuns - 3);
  const std::shared_ptr<const Evidence> base =
      Evidence::Build(many, catalog_, priors_);
  std::vector<v1::MeasuredRun> one(8, runs_.front()), two(8, runs_.front());
  for (size_t i = 0; i < 8; ++i) {
    one[i].set_batch(1000 + i);
    two[i].set_batch(2000 + i);
  }
  const std::shared_ptr<const Evidence> a =
      base->WithRuns(one, catalog_, priors_, AnchorOptions{});
  const std::shared_ptr<const Evidence> b =
      base->WithRuns(two, catalog_, priors_, AnchorOptions{});
  const std::shared_ptr<const Evidence> c =
      a->WithRuns(two, catalog_, priors_, AnchorOptions{});
  ASSERT_EQ(base->run_count(), Evidence::kChunkRuns - 3);
  ASSERT_EQ(a->run_count(), Evidence::kChunkRuns + 5);
  ASSERT_EQ(c->run_count(), Evidence::kChunkRuns + 13);
  for (size_t i = 0; i < 8; ++i) {
    const size_t at = Evidence::kChunkRuns - 3 + i;
    EXPECT_EQ(a->run(at).batch(), 1000 + i);
    EXPECT_EQ(b->run(at).batch(), 2000 + i);
    EXPECT_EQ(c->run(at).batch(), 1000 + i);
    EXPECT_EQ(c->run(at + 8).batch(), 2000 + i);
  }
  for (size_t i = 0; i < base->run_count(); i += 97) {
    EXPECT_EQ(a->run(i).batch(), many[i].batch());
    EXPECT_EQ(b->run(i).batch(), many[i].batch());
  }
}

}  // namespace
}  // namespace headroom
