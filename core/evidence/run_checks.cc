#include "core/evidence/run_checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "base/value_bounds.h"
#include "core/catalog/gpu_catalog.h"
#include "core/energy/energy_curves.h"
#include "core/memory/model_spec.h"
#include "core/memory/phases.h"
#include "core/memory/training_setup.h"

namespace headroom {
namespace {

// The parameter count of the model `run` measured: its spec's, or its
// catalog template's.
absl::StatusOr<uint64_t> SpecParams(const v1::MeasuredRun& run,
                                    const ModelCatalog& catalog,
                                    const std::string& where) {
  if (run.has_spec()) {
    // A run of a model that is not a template carries its spec.
    if (absl::Status valid = ValidateSpec(run.spec()); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".spec: ", valid.message()));
    }
    return CountParams(run.spec());
  }
  if (run.template_().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".template is empty; name a catalog template or set spec"));
  }
  absl::StatusOr<const v1::ModelSpec*> spec = catalog.Find(run.template_());
  if (!spec.ok()) {
    return absl::Status(
        spec.status().code(),
        absl::StrCat(where, ".template: ", spec.status().message()));
  }
  return CountParams(**spec);
}

// The run's size, its text fields' lengths and its source.
absl::Status CheckRunFields(const v1::MeasuredRun& run,
                            const std::string& where) {
  if (run.ByteSizeLong() > kMaxStoredRunBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is ", run.ByteSizeLong(),
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
  return absl::OkStatus();
}

// The run's model and setup as CheckFit reads them, its batch, and its
// parameter count against the model's.
absl::Status CheckRunModel(const v1::MeasuredRun& run,
                           const ModelCatalog& catalog,
                           const std::string& where) {
  ASSIGN_OR_RETURN(const uint64_t spec_params, SpecParams(run, catalog, where));
  // The setup as CheckFit reads it: what a fit answer refuses is no
  // evidence either.
  if (absl::Status setup = ValidateSetup(run.setup()); !setup.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", setup.message()));
  }
  RETURN_IF_ERROR(CheckCountRange(run.batch(), where + ".batch", 1, kMaxBatch));
  RETURN_IF_ERROR(
      CheckCountRange(run.params(), where + ".params", 1, kMaxParams));
  const double off = std::fabs(static_cast<double>(run.params()) -
                               static_cast<double>(spec_params));
  if (off > kParamsTolerance * static_cast<double>(spec_params)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".params = ", run.params(), " is not the model's count: ",
        run.has_spec() ? "its spec"
                       : absl::StrCat("template '", run.template_(), "'"),
        " has ", spec_params, " parameters; allowed within ",
        kParamsTolerance * 100, " % of it"));
  }
  return absl::OkStatus();
}

// The device's and each rank's peak, on the card (`peak_on_card`); one rank
// peak per GPU, or none.
absl::Status CheckRunPeaks(const v1::MeasuredRun& run, const std::string& where,
                           const ValueBound& peak_on_card) {
  if (run.has_device_peak_gb()) {
    RETURN_IF_ERROR(CheckBound(run.device_peak_gb(), where + ".device_peak_gb",
                               peak_on_card));
  }
  const uint32_t gpus = std::max(1u, run.setup().gpus());
  if (run.rank_peaks_gb_size() > 0 &&
      static_cast<uint32_t>(run.rank_peaks_gb_size()) != gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".rank_peaks_gb has ", run.rank_peaks_gb_size(),
        " entries; setup.gpus = ", gpus, " needs one per rank (or none)"));
  }
  for (int r = 0; r < run.rank_peaks_gb_size(); ++r) {
    RETURN_IF_ERROR(CheckBound(run.rank_peaks_gb(r),
                               absl::StrCat(where, ".rank_peaks_gb[", r, "]"),
                               peak_on_card));
  }
  return absl::OkStatus();
}

// The step time, the timed steps and the energy (with its mean power).
absl::Status CheckRunTiming(const v1::MeasuredRun& run,
                            const std::string& where) {
  const uint32_t gpus = std::max(1u, run.setup().gpus());
  if (run.has_step_seconds()) {
    RETURN_IF_ERROR(CheckBound(run.step_seconds(), where + ".step_seconds",
                               kStepSecondsBound));
  }
  RETURN_IF_ERROR(CheckCountRange(run.timed_steps(), where + ".timed_steps", 0,
                                  kMaxTimedSteps));
  if (run.has_energy_j()) {
    RETURN_IF_ERROR(CheckBound(run.energy_j(), where + ".energy_j",
                               kMeasuredRunEnergyBound));
    RETURN_IF_ERROR(CheckMeanPower(run.energy_j(), run.timed_steps(),
                                   run.step_seconds(), gpus,
                                   where + ".energy_j"));
  }
  return absl::OkStatus();
}

// Other planners' predictions: they may exceed the card; they stay finite.
absl::Status CheckRunPredictions(const v1::MeasuredRun& run,
                                 const std::string& where) {
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
    if (has) {
      RETURN_IF_ERROR(CheckBound(value, absl::StrCat(where, ".", field),
                                 kPredictedGbBound));
    }
  }
  return absl::OkStatus();
}

// OK when `lower` (at `lower_field`) is at most `upper` (at
// `upper_field`): the device holds what the allocator reserved, which
// holds what it allocated.
absl::Status CheckNotBelow(double upper, const std::string& upper_field,
                           double lower, const std::string& lower_field,
                           absl::string_view why) {
  if (upper >= lower) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(upper_field, " = ", upper,
                                                 " is below ", lower_field,
                                                 " = ", lower, "; ", why));
}

constexpr absl::string_view kReservedHoldsAllocated =
    "the caching allocator reserves at least what it allocated";
constexpr absl::string_view kDeviceHoldsReserved =
    "the device holds at least what the allocator reserved";

// One phase's figures: on the card, and in the device's order.
absl::Status CheckPhase(const v1::PhaseMeasurement& phase,
                        const std::string& at, const ValueBound& on_card) {
  for (const auto& [field, has, value] :
       {std::tuple<const char*, bool, double>{
            "allocated_gb", phase.has_allocated_gb(), phase.allocated_gb()},
        {"reserved_gb", phase.has_reserved_gb(), phase.reserved_gb()},
        {"device_gb", phase.has_device_gb(), phase.device_gb()}}) {
    if (has) {
      RETURN_IF_ERROR(CheckBound(value, absl::StrCat(at, ".", field), on_card));
    }
  }
  if (phase.has_allocated_gb() && phase.has_reserved_gb()) {
    RETURN_IF_ERROR(CheckNotBelow(phase.reserved_gb(), at + ".reserved_gb",
                                  phase.allocated_gb(), at + ".allocated_gb",
                                  kReservedHoldsAllocated));
  }
  if (phase.has_reserved_gb() && phase.has_device_gb()) {
    RETURN_IF_ERROR(CheckNotBelow(phase.device_gb(), at + ".device_gb",
                                  phase.reserved_gb(), at + ".reserved_gb",
                                  kDeviceHoldsReserved));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PhaseMeasurementNames() {
  std::string out;
  for (int p = v1::JobPhase_MIN; p <= v1::JobPhase_MAX; ++p) {
    if (p == v1::JOB_PHASE_UNSPECIFIED || !v1::JobPhase_IsValid(p)) continue;
    absl::StrAppend(&out, out.empty() ? "" : ", ",
                    PhaseName(static_cast<v1::JobPhase>(p)));
  }
  return out;
}

bool IsPhaseMeasurementName(absl::string_view name) {
  for (int p = v1::JobPhase_MIN; p <= v1::JobPhase_MAX; ++p) {
    if (p == v1::JOB_PHASE_UNSPECIFIED || !v1::JobPhase_IsValid(p)) continue;
    if (name == PhaseName(static_cast<v1::JobPhase>(p))) return true;
  }
  return false;
}

absl::Status CheckMemoryOrder(const v1::MeasuredRun& run,
                              const std::string& where,
                              const ValueBound& peak_on_card) {
  if (run.has_peak_reserved_gb()) {
    RETURN_IF_ERROR(CheckBound(run.peak_reserved_gb(),
                               where + ".peak_reserved_gb", peak_on_card));
    if (run.has_measured_peak_gb()) {
      RETURN_IF_ERROR(
          CheckNotBelow(run.peak_reserved_gb(), where + ".peak_reserved_gb",
                        run.measured_peak_gb(), where + ".measured_peak_gb",
                        kReservedHoldsAllocated));
    }
    if (run.has_device_peak_gb()) {
      RETURN_IF_ERROR(
          CheckNotBelow(run.device_peak_gb(), where + ".device_peak_gb",
                        run.peak_reserved_gb(), where + ".peak_reserved_gb",
                        kDeviceHoldsReserved));
    }
  }
  if (run.has_device_context_gb()) {
    RETURN_IF_ERROR(CheckBound(run.device_context_gb(),
                               where + ".device_context_gb", peak_on_card));
  }
  std::vector<std::string> seen;
  for (int i = 0; i < run.phases_size(); ++i) {
    const v1::PhaseMeasurement& phase = run.phases(i);
    const std::string at = absl::StrCat(where, ".phases[", i, "]");
    if (!IsPhaseMeasurementName(phase.phase())) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".phase = \"", absl::string_view(phase.phase()).substr(0, 64),
          "\" is unknown; allowed ", PhaseMeasurementNames()));
    }
    if (std::find(seen.begin(), seen.end(), phase.phase()) != seen.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".phase = \"", phase.phase(),
                       "\" is measured twice; each phase at most once"));
    }
    seen.push_back(phase.phase());
    RETURN_IF_ERROR(CheckPhase(phase, at, peak_on_card));
  }
  return absl::OkStatus();
}

absl::Status CheckMeasuredRun(const v1::MeasuredRun& run,
                              const ModelCatalog& catalog,
                              absl::string_view where_view) {
  const std::string where(where_view);
  RETURN_IF_ERROR(CheckRunFields(run, where));
  RETURN_IF_ERROR(CheckRunModel(run, catalog, where));
  // The card the run was measured on bounds every memory figure of it.
  absl::StatusOr<GpuInfo> gpu = FindGpu(run.gpu());
  if (!gpu.ok()) {
    return absl::Status(gpu.status().code(),
                        absl::StrCat(where, ".gpu: ", gpu.status().message()));
  }
  const ValueBound peak = CardPeakBound(gpu->memory_gb);
  const std::string card =
      absl::StrCat("GB (", gpu->name, " has ", gpu->memory_gb, " GB, x ",
                   kCardPeakSlack, " as GiB)");
  const ValueBound peak_on_card{0, peak.max, false, card};
  const ValueBound positive_peak_on_card{0, peak.max, true, card};
  RETURN_IF_ERROR(CheckRunPeaks(run, where, peak_on_card));
  RETURN_IF_ERROR(CheckMemoryOrder(run, where, peak_on_card));
  RETURN_IF_ERROR(CheckRunTiming(run, where));
  RETURN_IF_ERROR(CheckRunPredictions(run, where));
  if (!run.excluded().empty()) return absl::OkStatus();
  const bool measured = run.has_measured_peak_gb();
  const bool oom = run.has_oom_on_gb();
  if (measured == oom) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     " must have exactly one of measured_peak_gb and oom_on_gb "
                     "(or an excluded reason)"));
  }
  // A peak is at most the card it was measured on; a run goes OOM on a
  // card of at most that size.
  return CheckBound(measured ? run.measured_peak_gb() : run.oom_on_gb(),
                    where + (measured ? ".measured_peak_gb" : ".oom_on_gb"),
                    positive_peak_on_card);
}

absl::Status CheckEnergyRun(const v1::EnergyRun& run,
                            absl::string_view where_view) {
  const std::string where(where_view);
  RETURN_IF_ERROR(
      CheckLength(run.model(), absl::StrCat(where, ".model"), kMaxNameChars));
  RETURN_IF_ERROR(
      CheckLength(run.gpu(), absl::StrCat(where, ".gpu"), kMaxNameChars));
  RETURN_IF_ERROR(
      CheckLength(run.quant(), absl::StrCat(where, ".quant"), kMaxNameChars));
  for (const auto& [field, value, max] :
       {std::tuple<const char*, const std::string&, size_t>{"arch", run.arch(),
                                                            kMaxNameChars},
        {"framework", run.framework(), kMaxTextChars},
        {"worker", run.worker(), kMaxNameChars},
        {"source", run.source(), kMaxTextChars}}) {
    RETURN_IF_ERROR(CheckLength(value, absl::StrCat(where, ".", field), max));
  }
  const std::string named = absl::StrCat(where, " (", run.model(), ")");
  absl::StatusOr<GpuInfo> gpu = FindGpu(run.gpu());
  if (!gpu.ok()) {
    return absl::Status(gpu.status().code(),
                        absl::StrCat(named, ".gpu: ", gpu.status().message()));
  }
  absl::StatusOr<Quant> quant = ParseQuant(run.quant());
  if (!quant.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(named, ": ", quant.status().message()));
  }
  RETURN_IF_ERROR(
      CheckBound(run.params_b(), named + ".params_b",
                 ValueBound{0, kMaxParamsB, true, "billion parameters"}));
  RETURN_IF_ERROR(CheckCountRange(
      run.tokens_generated(), named + ".tokens_generated", 1, kMaxRunTokens));
  RETURN_IF_ERROR(
      CheckBound(run.window_s(), named + ".window_s", kWindowSecondsBound));
  RETURN_IF_ERROR(CheckBound(run.idle_w(), named + ".idle_w", kIdleWattsBound));
  RETURN_IF_ERROR(CheckBound(run.tokens_per_s(), named + ".tokens_per_s",
                             kTokensPerSBound));
  return CheckBound(run.energy_j(), named + ".energy_j", kWindowEnergyBound);
}

}  // namespace headroom
