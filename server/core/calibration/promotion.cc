#include "server/core/calibration/promotion.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/core/memory/fit_verdict.h"
#include "server/core/memory/model_spec.h"

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
    const std::vector<std::string>& history, const std::string& current) {
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
        "nothing to roll back to: no factor set was current before ", current));
  }
  return stack.back();
}

absl::Status ValidateRuns(const std::vector<v1::MeasuredRun>& runs,
                          const ModelCatalog& catalog) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    const std::string where = absl::StrCat("runs[", i, "]");
    if (run.has_spec()) {
      // A run of a model that is not a template carries its spec.
      if (absl::Status valid = ValidateSpec(run.spec()); !valid.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".spec: ", valid.message()));
      }
    } else if (run.template_().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".template is empty; name a catalog template or set spec"));
    } else {
      absl::Status found = catalog.Find(run.template_()).status();
      if (!found.ok()) {
        return absl::Status(
            found.code(), absl::StrCat(where, ".template: ", found.message()));
      }
    }
    if (run.batch() == 0 || run.batch() > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".batch = ", run.batch(),
                       " is out of range; allowed 1..", kMaxBatch));
    }
    if (!run.excluded().empty()) continue;
    const bool measured = run.has_measured_peak_gb();
    const bool oom = run.has_oom_on_gb();
    if (measured == oom) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          " must have exactly one of measured_peak_gb and oom_on_gb "
          "(or an excluded reason)"));
    }
    const double value = measured ? run.measured_peak_gb() : run.oom_on_gb();
    if (!(value > 0) || !std::isfinite(value) || value > 1e6) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, measured ? ".measured_peak_gb" : ".oom_on_gb",
                       " = ", value, " is out of range; allowed (0, 1e6] GB"));
    }
  }
  return absl::OkStatus();
}

}  // namespace headroom
