#include "core/planner/device_judge.h"

#include <algorithm>
#include <vector>

#include "core/calibration/kind_bounds.h"
#include "core/memory/phases.h"

namespace headroom {
namespace {

struct Ks {
  double allocated = 1, reserved = 1, device = 1;
};

Ks KsAt(const DeviceJudge& judge, uint64_t batch) {
  const double k = judge.k_at(batch);
  Ks ks{k, k, k};
  if (judge.kind.has_value()) {
    ks.allocated = std::max(k, KOf(*judge.kind, v1::ALLOCATED));
    ks.reserved = std::max(k, KOf(*judge.kind, v1::RESERVED));
    ks.device = std::max(k, KOf(*judge.kind, v1::DEVICE));
  }
  return ks;
}

bool Passes(const DeviceJudge& judge, uint64_t batch, bool fits_only) {
  const FitVerdict verdict = JudgeBatch(judge, batch).verdict;
  return fits_only ? verdict == FitVerdict::kFits
                   : verdict != FitVerdict::kDoesNotFit;
}

}  // namespace

BatchJudgement JudgeBatch(const DeviceJudge& judge, uint64_t batch) {
  const double step_gb = PeakAt(*judge.step_profile, judge.factors, batch);
  const Ks ks = KsAt(judge, batch);
  BatchJudgement out;
  out.batch.set_batch(static_cast<uint32_t>(batch));
  double worst_upper = -1, worst_device = 0;
  for (const PhaseBytes& phase :
       PhasePeaks(*judge.profile, *judge.spec, *judge.setup, judge.factors,
                  batch, step_gb)) {
    v1::PhaseFigures* p = out.batch.add_phases();
    p->set_phase(PhaseName(phase.phase));
    p->set_holds(phase.holds);
    v1::MemoryFigures* f = p->mutable_figures();
    const double allocated = phase.allocated_gb;
    f->set_allocated_gb(allocated);
    f->set_allocated_upper_gb(allocated * ks.allocated);
    f->set_reserved_gb(judge.costs.ReservedGb(allocated));
    f->set_reserved_upper_gb(f->reserved_gb() * ks.reserved);
    f->set_device_gb(judge.costs.DeviceGb(allocated));
    f->set_device_upper_gb(f->device_gb() * ks.device);
    worst_device = std::max(worst_device, f->device_gb());
    if (f->device_upper_gb() > worst_upper) {
      worst_upper = f->device_upper_gb();
      out.batch.set_phase(p->phase());
      *out.batch.mutable_figures() = *f;
    }
  }
  if (worst_device > judge.card_gb) {
    out.verdict = FitVerdict::kDoesNotFit;
  } else if (worst_upper * judge.headroom <= judge.card_gb && !judge.untested) {
    out.verdict = FitVerdict::kFits;
  } else {
    out.verdict = FitVerdict::kBorderline;
  }
  return out;
}

uint64_t StepMaxBatchOnDevice(const DeviceJudge& judge, bool fits_only) {
  const DeviceCosts& c = judge.costs;
  const double fixed = c.context_gb + c.nccl_gb;
  if (fits_only) {
    const double k = KsAt(judge, 1).device;
    const double card =
        (judge.card_gb / (k * judge.headroom) - fixed) / c.reserved_ratio;
    if (card <= 0) return 0;
    return MaxBatch(*judge.step_profile, judge.factors, card,
                    VerdictRule{1.0, 1.0}, /*fits_only=*/false);
  }
  const double card = (judge.card_gb - fixed) / c.reserved_ratio;
  if (card <= 0) return 0;
  return MaxBatch(*judge.step_profile, judge.factors, card,
                  VerdictRule{1.0, 1.0}, /*fits_only=*/false);
}

uint64_t DeviceMaxBatch(const DeviceJudge& judge, uint64_t step_bound,
                        bool fits_only) {
  if (fits_only && judge.untested) return 0;
  if (step_bound == 0) return 0;
  if (Passes(judge, step_bound, fits_only)) return step_bound;
  // Largest passing batch in [0, step_bound): passes(lo) or lo == 0.
  uint64_t lo = 0, hi = step_bound;
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (Passes(judge, mid, fits_only)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace headroom
