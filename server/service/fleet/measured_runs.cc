#include "server/service/fleet/measured_runs.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/catalog/gpu_catalog.h"
#include "server/core/evidence/model_key.h"
#include "server/core/frontends/frontend_registry.h"
#include "server/core/memory/model_spec.h"

namespace headroom {

std::optional<v1::MeasuredRun> MeasuredRunFor(const v1::Probe& probe,
                                              const v1::ProbeResult& result,
                                              const std::string& worker) {
  // The memory model predicts eager execution: compiled runs stay out.
  if (result.batch().mode() == "compiled") return std::nullopt;
  std::string gpu = result.gpu().catalog_gpu();
  if (gpu.empty()) gpu = CatalogGpuForDriverName(result.gpu().name());
  if (gpu.empty()) gpu = probe.gpu();
  absl::StatusOr<GpuInfo> card = FindGpu(gpu);
  if (gpu.empty() || !card.ok()) return std::nullopt;
  const v1::BatchResult& batch = result.batch();
  v1::MeasuredRun run;
  run.set_template_(probe.template_());
  run.set_family(probe.spec().family());
  // The key and shape of what was measured: a template's spec is the
  // catalog's; any other model's spec travels with the run.
  const v1::TrainingSetup setup =
      ProfileSetup(probe.request().model(), probe.request().setup());
  *run.mutable_setup() = setup;
  if (probe.template_().empty()) *run.mutable_spec() = probe.spec();
  run.set_model_key(ModelKeyOf(probe.spec(), setup).id);
  const bool simulated = batch.simulated() || result.gpu().simulated();
  const std::string& executor = probe.request().executor();
  run.set_measured_by(simulated            ? v1::SIM
                      : executor == "cuda" ? v1::CUDA_PROBE
                                           : v1::TORCH_HARNESS);
  if (!simulated) run.set_attention_backend("spec");
  run.set_gpu(card->name);
  run.set_batch(batch.batch());
  run.set_params(CountParams(probe.spec()));
  if (!batch.error().empty()) {
    run.set_excluded(absl::StrCat("probe error: ", batch.error()));
  } else if (batch.oom()) {
    run.set_oom_on_gb(card->memory_gb);
  } else if (batch.has_peak_allocated_gb()) {
    run.set_measured_peak_gb(batch.peak_allocated_gb());
  } else {
    run.set_excluded("no allocator peak measured (device peak only)");
  }
  run.set_source(
      absl::StrCat("probe ", probe.id(), " repetition ", batch.repetition()));
  run.set_simulated(simulated);
  run.set_worker(worker);
  run.set_driver_version(result.gpu().driver_version());
  run.set_cuda_version(result.gpu().cuda_version());
  std::vector<std::string> versions;
  for (const auto& [name, version] : result.framework_versions()) {
    versions.push_back(absl::StrCat(name, " ", version));
  }
  std::sort(versions.begin(), versions.end());
  run.set_framework(absl::StrJoin(versions, ", "));
  if (batch.has_device_peak_gb()) {
    run.set_device_peak_gb(batch.device_peak_gb());
  }
  if (batch.has_step_seconds()) run.set_step_seconds(batch.step_seconds());
  if (batch.has_energy_j()) run.set_energy_j(batch.energy_j());
  return run;
}

}  // namespace headroom
