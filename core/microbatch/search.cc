#include "core/microbatch/search.h"

#include <algorithm>

namespace headroom {
namespace {

// The largest index in [lo, hi] that fits, given that lo - 1 fits (or is
// -1) and hi + 1 does not (or is past the end); lo - 1 when none does.
int Bisect(int lo, int hi, const RunCandidate& run, bool* aborted) {
  int best = lo - 1;
  while (lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    const RunOutcome outcome = run(mid);
    if (outcome == RunOutcome::kAbort) {
      *aborted = true;
      return best;
    }
    if (outcome == RunOutcome::kFits) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

}  // namespace

std::vector<PlannedFit> PlannedFitsOf(const v1::PlanMicrobatchResponse& plan,
                                      absl::string_view mode) {
  std::vector<PlannedFit> planned;
  for (const v1::PlannedMicrobatch& p : plan.candidates()) {
    if (p.mode() != mode) continue;
    if (p.action() == v1::PlannedMicrobatch::MEASURE) {
      planned.push_back(PlannedFit::kOpen);
    } else if (p.verdict() == v1::FITS) {
      planned.push_back(PlannedFit::kPredictedFit);
    } else {
      planned.push_back(PlannedFit::kPredictedOom);
    }
  }
  return planned;
}

SearchResult VerifyThenBisect(const std::vector<PlannedFit>& planned,
                              const RunCandidate& run) {
  const int n = static_cast<int>(planned.size());
  int last_fit = -1;
  int last_possible = -1;
  for (int i = 0; i < n; ++i) {
    if (planned[i] == PlannedFit::kPredictedFit) last_fit = i;
    if (planned[i] != PlannedFit::kPredictedOom) last_possible = i;
  }
  SearchResult result;
  if (last_fit < 0) {
    result.best = Bisect(0, last_possible, run, &result.aborted);
    return result;
  }
  const RunOutcome verified = run(last_fit);
  if (verified == RunOutcome::kAbort) {
    result.aborted = true;
  } else if (verified == RunOutcome::kFits) {
    result.best = std::max(
        last_fit, Bisect(last_fit + 1, last_possible, run, &result.aborted));
  } else {
    result.best = Bisect(0, last_fit - 1, run, &result.aborted);
  }
  return result;
}

SearchResult DoublingThenBisect(const std::vector<uint32_t>& candidates,
                                const RunCandidate& run) {
  const int n = static_cast<int>(candidates.size());
  SearchResult result;
  int first_miss = n;
  for (int i = 0; i < n;) {
    const RunOutcome outcome = run(i);
    if (outcome == RunOutcome::kAbort) {
      result.aborted = true;
      return result;
    }
    if (outcome != RunOutcome::kFits) {
      first_miss = i;
      break;
    }
    result.best = i;
    int next = i + 1;
    while (next < n && candidates[next] < 2 * candidates[i]) ++next;
    i = next;
  }
  if (result.best >= 0) {
    result.best = std::max(result.best, Bisect(result.best + 1, first_miss - 1,
                                               run, &result.aborted));
  }
  return result;
}

SearchResult Exhaustive(int count, const RunCandidate& run) {
  SearchResult result;
  for (int i = 0; i < count; ++i) {
    const RunOutcome outcome = run(i);
    if (outcome == RunOutcome::kAbort) {
      result.aborted = true;
      return result;
    }
    if (outcome == RunOutcome::kFits) result.best = i;
  }
  return result;
}

}  // namespace headroom
