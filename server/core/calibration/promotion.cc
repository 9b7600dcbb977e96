#include "server/core/calibration/promotion.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/core/catalog/gpu_catalog.h"
#include "server/core/common/input_limits.h"
#include "server/core/common/status_macros.h"
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

namespace {

// OK when `value` is finite and in [0, max] (or (0, max] when `positive`).
absl::Status CheckRange(double value, const std::string& field, double max,
                        bool positive, absl::string_view unit) {
  const bool low_ok = positive ? value > 0 : value >= 0;
  if (low_ok && std::isfinite(value) && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = ", value, " is out of range; allowed ",
                   positive ? "(0, " : "[0, ", max, "] ", unit));
}

}  // namespace

absl::Status ValidateRuns(const std::vector<v1::MeasuredRun>& runs,
                          const ModelCatalog& catalog) {
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    const std::string where = absl::StrCat("runs[", i, "]");
    if (run.ByteSizeLong() > kMaxStoredRunBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is ", run.ByteSizeLong(),
          " bytes; a stored run allows up to ", kMaxStoredRunBytes));
    }
    for (const auto& [field, value, max] :
         {std::tuple<const char*, const std::string&, size_t>{
              "template", run.template_(), kMaxNameChars},
          {"family", run.family(), kMaxNameChars},
          {"gpu", run.gpu(), kMaxNameChars},
          {"excluded", run.excluded(), kMaxTextChars},
          {"variant_of", run.variant_of(), kMaxNameChars},
          {"source", run.source(), kMaxTextChars},
          {"worker", run.worker(), kMaxNameChars},
          {"driver_version", run.driver_version(), kMaxNameChars},
          {"cuda_version", run.cuda_version(), kMaxNameChars},
          {"framework", run.framework(), kMaxTextChars},
          {"attention_backend", run.attention_backend(), kMaxNameChars},
          {"model_key", run.model_key(), kMaxNameChars}}) {
      RETURN_IF_ERROR(CheckLength(value, absl::StrCat(where, ".", field), max));
    }
    if (!v1::MeasurementSource_IsValid(run.measured_by())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".measured_by = ", run.measured_by(),
                       " is not a known MeasurementSource"));
    }
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
    if (run.params() == 0 || run.params() > kMaxRunParams) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".params = ", run.params(), " is out of range; allowed 1..",
          kMaxRunParams, " (the model's parameter count)"));
    }
    // The card the run was measured on bounds every memory figure of it.
    absl::StatusOr<GpuInfo> gpu = FindGpu(run.gpu());
    if (!gpu.ok()) {
      return absl::Status(
          gpu.status().code(),
          absl::StrCat(where, ".gpu: ", gpu.status().message()));
    }
    const std::string card =
        absl::StrCat("GB (", gpu->name, " has ", gpu->memory_gb, " GB)");
    if (run.has_device_peak_gb()) {
      RETURN_IF_ERROR(CheckRange(run.device_peak_gb(),
                                 where + ".device_peak_gb", gpu->memory_gb,
                                 /*positive=*/false, card));
    }
    if (run.has_step_seconds()) {
      RETURN_IF_ERROR(CheckRange(run.step_seconds(), where + ".step_seconds",
                                 kMaxRunSeconds, /*positive=*/false, "s"));
    }
    if (run.has_energy_j()) {
      RETURN_IF_ERROR(CheckRange(run.energy_j(), where + ".energy_j",
                                 kMaxMeasuredRunEnergyJ, /*positive=*/false,
                                 "J"));
    }
    for (const auto& [field, has, value] :
         {std::tuple<const char*, bool, double>{"reference_shipped_gb",
                                                run.has_reference_shipped_gb(),
                                                run.reference_shipped_gb()},
          {"reference_heldout_gb", run.has_reference_heldout_gb(),
           run.reference_heldout_gb()},
          {"accelerate_fp32_gb", run.has_accelerate_fp32_gb(),
           run.accelerate_fp32_gb()},
          {"accelerate_bf16_gb", run.has_accelerate_bf16_gb(),
           run.accelerate_bf16_gb()}}) {
      // Other planners' predictions may exceed the card; they stay finite.
      if (has) {
        RETURN_IF_ERROR(CheckRange(value, absl::StrCat(where, ".", field),
                                   kMaxCardGb, /*positive=*/false, "GB"));
      }
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
    // A peak is at most the card it was measured on; a run goes OOM on a
    // card of at most that size.
    RETURN_IF_ERROR(
        CheckRange(measured ? run.measured_peak_gb() : run.oom_on_gb(),
                   where + (measured ? ".measured_peak_gb" : ".oom_on_gb"),
                   gpu->memory_gb, /*positive=*/true, card));
  }
  return absl::OkStatus();
}

}  // namespace headroom
