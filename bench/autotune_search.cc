// headroom-autotune-search: how many probe runs it takes to pick the largest
// microbatch that fits, three ways, on simulated GPUs whose truth the
// planner does not know (the sim executor's hidden factors, context and
// card, exactly what a sim worker reports):
//   exhaustive  every candidate is run;
//   doubling    Lightning's batch-size finder: from the smallest candidate,
//               double (next candidate at least twice as large) until one
//               goes OOM, then bisect between the last fit and that OOM;
//   headroom    PlanMicrobatch predicts every candidate; the largest
//               calibrated FITS is run once to verify it, then only the
//               span it leaves open (up to the last candidate not called
//               DOES_NOT_FIT) is bisected (the truth is monotone in the
//               microbatch).
// Each run of a candidate counts once. All three must end on the same
// choice: the largest candidate whose true peak fits the budget.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "base/json_io.h"
#include "core/calibration/calibrate.h"
#include "core/catalog/gpu_catalog.h"
#include "core/catalog/model_catalog.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/search.h"
#include "core/microbatch/select.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "worker/daemon/sim_executor.h"

namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

struct Search {
  int runs = 0;
  uint32_t choice = 0;  // 0: none fits
};

}  // namespace

int main() {
  auto catalog = headroom::LoadModelCatalog(kRoot + "/models");
  auto runs = headroom::LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
  if (!catalog.ok() || !runs.ok()) {
    std::fprintf(stderr, "cannot load the catalog or the runs\n");
    return 1;
  }
  auto fitted = headroom::Calibrate(*runs, *catalog, headroom::FitOptions{},
                                    "data/memory-runs.jsonl");
  if (!fitted.ok()) {
    std::fprintf(stderr, "fit failed: %s\n",
                 std::string(fitted.status().message()).c_str());
    return 1;
  }
  const std::vector<uint32_t> candidates = {
      1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  const double vram_fraction = 0.95;
  const double reserve_gb = 1.0;
  std::printf("%-14s %-5s %7s | %10s %9s %9s | %s\n", "template", "gpu",
              "choice", "exhaustive", "doubling", "headroom",
              "plan: fits/borderline/no");
  int total[3] = {0, 0, 0};
  int disagreements = 0;
  uint64_t seed = 1;
  for (const char* name : {"gpt2", "bert-base", "llama3-block"}) {
    for (const char* gpu_name : {"L4", "A10G", "H100"}) {
      const headroom::GpuInfo gpu = *headroom::FindGpu(gpu_name);
      headroom::worker::SimGpuConfig sim;
      sim.kind = gpu.name;
      sim.memory_gb = gpu.memory_gb;
      sim.seed = seed++;
      headroom::worker::SimExecutor truth(sim);
      headroom::v1::Assignment assignment;
      *assignment.mutable_spec() = **catalog->Find(name);
      *assignment.mutable_setup() = headroom::CalibrationSetup();
      const double budget = vram_fraction * gpu.memory_gb - reserve_gb;
      // What a worker would measure: the true peak plus the context.
      auto fits = [&](int i) {
        return truth.TruePeakGb(assignment, candidates[i]) +
                   truth.context_gb() <=
               budget;
      };
      const int n = static_cast<int>(candidates.size());

      // Each call of a search's runner is one probe run.
      const auto runner = [&](Search* search) {
        return [&fits, search](int i) {
          ++search->runs;
          return fits(i) ? headroom::RunOutcome::kFits
                         : headroom::RunOutcome::kDoesNotFit;
        };
      };
      const auto choice = [&](const headroom::SearchResult& found) {
        return found.best >= 0 ? candidates[found.best] : 0u;
      };
      Search exhaustive;
      exhaustive.choice = choice(headroom::Exhaustive(n, runner(&exhaustive)));
      Search doubling;
      doubling.choice =
          choice(headroom::DoublingThenBisect(candidates, runner(&doubling)));

      headroom::v1::PlanMicrobatchRequest request;
      request.set_template_(name);
      *request.mutable_setup() = headroom::CalibrationSetup();
      request.set_global_batch(candidates.back());
      for (uint32_t c : candidates) request.add_microbatch_candidates(c);
      request.set_vram_fraction(vram_fraction);
      request.set_reserve_gb(reserve_gb);
      request.set_gpu(gpu.name);
      auto plan =
          headroom::PlanMicrobatch(request, *catalog, fitted->factor_set);
      if (!plan.ok()) {
        std::fprintf(stderr, "plan failed: %s\n",
                     std::string(plan.status().message()).c_str());
        return 1;
      }
      int fit_count = 0, borderline = 0, no_count = 0;
      const std::vector<headroom::PlannedFit> planned_fits =
          headroom::PlannedFitsOf(*plan, headroom::kEagerMode);
      for (headroom::PlannedFit p : planned_fits) {
        fit_count += p == headroom::PlannedFit::kPredictedFit;
        borderline += p == headroom::PlannedFit::kOpen;
        no_count += p == headroom::PlannedFit::kPredictedOom;
      }
      // Headroom's search (core/microbatch/search.h), as a worker
      // runs it.
      Search planned;
      planned.choice =
          choice(headroom::VerifyThenBisect(planned_fits, runner(&planned)));

      const bool same = planned.choice == exhaustive.choice &&
                        doubling.choice == exhaustive.choice;
      if (!same) ++disagreements;
      total[0] += exhaustive.runs;
      total[1] += doubling.runs;
      total[2] += planned.runs;
      std::printf("%-14s %-5s %7u | %10d %9d %9d | %d/%d/%d", name,
                  gpu.name.c_str(), exhaustive.choice, exhaustive.runs,
                  doubling.runs, planned.runs, fit_count, borderline, no_count);
      if (!same) {
        std::printf("  DIFFERENT: doubling %u, headroom %u", doubling.choice,
                    planned.choice);
      }
      std::printf("\n");
    }
  }
  std::printf("%-14s %-5s %7s | %10d %9d %9d |\n", "total", "", "", total[0],
              total[1], total[2]);
  std::printf("choices that differ from the exhaustive sweep: %d\n",
              disagreements);
  return disagreements == 0 ? 0 : 1;
}
