#include "worker/daemon/gpu_setup.h"

#include "absl/strings/str_cat.h"
#include "server/core/catalog/gpu_catalog.h"

namespace headroom::worker {

absl::StatusOr<GpuSetup> SetUpExecutors(const GpuSetupOptions& options) {
  GpuSetup setup;
  bool want_sim = false;
  bool want_auto = false;
  for (const std::string& name : options.executors) {
    if (name == "sim") {
      want_sim = true;
    } else if (name == "auto") {
      want_auto = true;
    } else if (name == "torch" || name == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("executor \"", name,
                       "\" needs a GPU with its driver; none was found"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "executors: unknown \"", name, "\"; allowed torch, cuda, sim, auto"));
    }
  }
  if (want_auto) {
    setup.notes.push_back(
        "no GPU driver found: running a simulated GPU (results labelled "
        "simulated)");
    want_sim = true;
  }
  if (want_sim) {
    SimGpuConfig sim = options.sim;
    absl::StatusOr<GpuInfo> kind = FindGpu(sim.kind);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_gpu: ", kind.status().message()));
    }
    sim.kind = kind->name;
    if (sim.memory_gb == 0) sim.memory_gb = kind->memory_gb;
    if (!(sim.memory_gb > 0 && sim.memory_gb <= kMaxCardGb)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_memory_gb = ", sim.memory_gb,
                       " is out of range; allowed (0, ", kMaxCardGb, "]"));
    }
    if (sim.step_ms < 1 || sim.step_ms > 60000 || sim.sample_ms < 1 ||
        sim.sample_ms > 10000) {
      return absl::InvalidArgumentError(
          "sim_step_ms must be 1..60000 and sample_ms 1..10000");
    }
    auto executor = std::make_unique<SimExecutor>(sim);
    setup.gpus.push_back(executor->Device());
    setup.framework_versions["simulator"] = "headroom-sim 1";
    setup.executors.push_back(std::move(executor));
  }
  return setup;
}

}  // namespace headroom::worker
