#include "core/calibration/promotion.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/evidence/run_checks.h"

namespace headroom {
namespace {

const v1::ColumnSummary* HeldOut(const v1::FactorSet& set) {
  auto it = set.page().summary().find("ours_heldout");
  return it == set.page().summary().end() ? nullptr : &it->second;
}

}  // namespace

PromotionDecision DecidePromotion(const v1::FactorSet& candidate,
                                  const v1::FactorSet* current, bool force) {
  if (current == nullptr) return {true, "no factor set was current"};
  const v1::ColumnSummary* mine = HeldOut(candidate);
  const v1::ColumnSummary* theirs = HeldOut(*current);
  if (mine == nullptr || theirs == nullptr) {
    if (force) return {true, "forced (a held-out page is missing)"};
    return {false, "a held-out page is missing; pass force to promote"};
  }
  const std::string figures = absl::StrCat(
      "held-out median abs error ", mine->median_abs_err(), " vs ",
      theirs->median_abs_err(), ", saidFitsButOom ", mine->said_fits_but_oom(),
      " vs ", theirs->said_fits_but_oom(), " (", current->version(), ")");
  const bool no_worse =
      mine->median_abs_err() <= theirs->median_abs_err() &&
      mine->said_fits_but_oom() <= theirs->said_fits_but_oom();
  if (no_worse) return {true, "no worse: " + figures};
  if (force) return {true, "forced although worse: " + figures};
  return {false, "worse, kept " + current->version() + ": " + figures};
}

absl::StatusOr<std::string> RollbackTarget(
    const std::vector<std::string>& history, const std::string& current,
    absl::string_view what) {
  std::vector<std::string> stack;
  for (const std::string& version : history) {
    auto earlier = std::find(stack.begin(), stack.end(), version);
    if (earlier != stack.end()) {
      stack.erase(earlier + 1, stack.end());
    } else {
      stack.push_back(version);
    }
  }
  while (!stack.empty() && stack.back() == current) stack.pop_back();
  if (stack.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nothing to roll back to: no ", what, " was current before ", current));
  }
  return stack.back();
}

absl::Status ValidateRuns(const std::vector<v1::MeasuredRun>& runs,
                          const ModelCatalog& catalog) {
  for (size_t i = 0; i < runs.size(); ++i) {
    RETURN_IF_ERROR(
        CheckMeasuredRun(runs[i], catalog, absl::StrCat("runs[", i, "]")));
  }
  return absl::OkStatus();
}

}  // namespace headroom
