#include "core/planner/fit_request.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/memory/fit_verdict.h"
#include "core/planner/fit_planner.h"

namespace headroom {
namespace {

absl::StatusOr<ResolvedTarget> Resolve(const v1::Target& target, int index) {
  switch (target.kind_case()) {
    case v1::Target::kGpu: {
      ASSIGN_OR_RETURN(GpuInfo gpu, FindGpu(target.gpu()));
      return ResolvedTarget{gpu.name, gpu.memory_gb, true};
    }
    case v1::Target::kMemoryGb: {
      const double gb = target.memory_gb();
      RETURN_IF_ERROR(
          CheckCardGb(gb, absl::StrCat("targets[", index, "].memory_gb")));
      return ResolvedTarget{absl::StrCat(gb, " GB"), gb};
    }
    case v1::Target::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "targets[", index, "] is empty; set gpu (a catalog name) or memory_gb"));
}

}  // namespace

absl::StatusOr<std::vector<ResolvedTarget>> ResolveTargets(
    const v1::CheckFitRequest& request) {
  if (request.targets().empty() ||
      request.targets_size() > kMaxTargetsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets has ", request.targets_size(),
                     " entries; allowed 1..", kMaxTargetsPerRequest));
  }
  std::vector<ResolvedTarget> targets;
  targets.reserve(request.targets_size());
  for (int i = 0; i < request.targets_size(); ++i) {
    ASSIGN_OR_RETURN(ResolvedTarget target, Resolve(request.targets(i), i));
    targets.push_back(std::move(target));
  }
  return targets;
}

absl::StatusOr<double> CoverageOf(const v1::CheckFitRequest& request,
                                  double default_coverage) {
  const double coverage =
      request.coverage() == 0 ? default_coverage : request.coverage();
  if (!KAtCoverage(1, 1, coverage).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", request.coverage(),
        " is not calibrated; allowed 0 (server default), 0.9, 0.95"));
  }
  return coverage;
}

}  // namespace headroom
