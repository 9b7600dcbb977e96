#include "core/microbatch/search.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace headroom {
namespace {

using F = PlannedFit;

// A monotone truth: candidates below `edge` fit. Records every run.
struct Truth {
  int edge = 0;
  std::vector<int> runs;
  RunCandidate Runner() {
    return [this](int i) {
      runs.push_back(i);
      return i < edge ? RunOutcome::kFits : RunOutcome::kDoesNotFit;
    };
  }
};

TEST(VerifyThenBisect, RunsThePredictedFitThenOnlyTheOpenSpan) {
  // 0..3 predicted fits, 4..6 open, 7..9 predicted OOM; truth: 0..4 fit.
  const std::vector<F> plan = {
      F::kPredictedFit, F::kPredictedFit, F::kPredictedFit, F::kPredictedFit,
      F::kOpen,         F::kOpen,         F::kOpen,         F::kPredictedOom,
      F::kPredictedOom, F::kPredictedOom};
  Truth truth{5, {}};
  const SearchResult found = VerifyThenBisect(plan, truth.Runner());
  EXPECT_EQ(found.best, 4);
  EXPECT_FALSE(found.aborted);
  // Verify 3, then bisect 4..6: 5 (no), 4 (yes).
  EXPECT_EQ(truth.runs, (std::vector<int>{3, 5, 4}));
}

TEST(VerifyThenBisect, AWrongPredictedFitIsCaughtAndTheSpanBelowBisected) {
  const std::vector<F> plan = {F::kPredictedFit, F::kPredictedFit,
                               F::kPredictedFit, F::kPredictedFit,
                               F::kPredictedFit, F::kOpen};
  Truth truth{2, {}};  // only 0 and 1 really fit
  const SearchResult found = VerifyThenBisect(plan, truth.Runner());
  EXPECT_EQ(found.best, 1);
  EXPECT_EQ(truth.runs.front(), 4);  // the largest predicted fit first
  EXPECT_EQ(std::set<int>(truth.runs.begin(), truth.runs.end()).size(),
            truth.runs.size());
}

TEST(VerifyThenBisect, AnAbortStopsTheSearch) {
  const std::vector<F> plan = {F::kOpen, F::kOpen, F::kOpen};
  int calls = 0;
  const SearchResult found = VerifyThenBisect(plan, [&](int) {
    ++calls;
    return RunOutcome::kAbort;
  });
  EXPECT_TRUE(found.aborted);
  EXPECT_EQ(found.best, -1);
  EXPECT_EQ(calls, 1);
}

// Random monotone truths and plans whose classes are ordered like a real
// plan's (fits, then open, then OOM) but may be wrong: every search ends on
// the exhaustive choice, never runs a candidate twice, and Headroom's runs
// no more than the exhaustive sweep.
TEST(Search, AllThreeAgreeWithExhaustiveOnMonotoneTruths) {
  std::mt19937 rng(7);
  const std::vector<uint32_t> candidates = {1,  2,  4,  8,   12,  16,  24, 32,
                                            48, 64, 96, 128, 192, 256, 384};
  const int n = static_cast<int>(candidates.size());
  for (int trial = 0; trial < 300; ++trial) {
    const int edge = std::uniform_int_distribution<int>(0, n)(rng);
    int fit_end = std::uniform_int_distribution<int>(0, n)(rng);
    int open_end = std::uniform_int_distribution<int>(fit_end, n)(rng);
    std::vector<F> plan;
    for (int i = 0; i < n; ++i) {
      plan.push_back(i < fit_end    ? F::kPredictedFit
                     : i < open_end ? F::kOpen
                                    : F::kPredictedOom);
    }
    // The plan may only rule out candidates the truth also rules out, as
    // a calibrated DOES_NOT_FIT does; a predicted fit may still be wrong.
    if (open_end < edge) open_end = edge;
    for (int i = 0; i < n; ++i) {
      if (i < open_end && plan[i] == F::kPredictedOom) plan[i] = F::kOpen;
    }
    Truth exhaustive{edge, {}}, doubling{edge, {}}, headroom{edge, {}};
    const int want = Exhaustive(n, exhaustive.Runner()).best;
    ASSERT_EQ(want, edge - 1);
    EXPECT_EQ(DoublingThenBisect(candidates, doubling.Runner()).best, want)
        << "trial " << trial;
    EXPECT_EQ(VerifyThenBisect(plan, headroom.Runner()).best, want)
        << "trial " << trial << " edge " << edge << " fit_end " << fit_end;
    for (const Truth* t : {&doubling, &headroom}) {
      EXPECT_EQ(std::set<int>(t->runs.begin(), t->runs.end()).size(),
                t->runs.size());
    }
    EXPECT_LE(headroom.runs.size(), exhaustive.runs.size());
  }
}

}  // namespace
}  // namespace headroom
