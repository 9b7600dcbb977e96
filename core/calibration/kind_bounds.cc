#include "core/calibration/kind_bounds.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/ratios.h"
#include "core/calibration/calibration_page.h"
#include "core/calibration/evaluate.h"
#include "core/catalog/gpu_catalog.h"
#include "core/evidence/evidence.h"
#include "core/evidence/model_key.h"
#include "core/memory/device_memory.h"
#include "core/memory/framework_profile.h"
#include "core/memory/parallel.h"
#include "core/planner/fit_planner.h"

namespace headroom {
namespace {

// A card no job fills: the target of a completed published run on a GPU
// the catalog lacks (its figures, not its verdict, are what is compared).
constexpr double kUnknownCardGb = 1e6;

// The coverage the held-out answers are asked at: the figures compared
// are the estimate's, not its bound, so any calibrated one serves.
constexpr double kAnswerCoverage = 0.95;

// k at `coverage` (RatioAtCoverage, never below 1); 0 for none.
double KOfRatios(std::vector<double> ratios, double coverage) {
  if (ratios.empty()) return 0;
  return std::max(1.0, RatioAtCoverage(std::move(ratios), coverage));
}

// What an observation says of the bound: measured / predicted of its
// metric, or for an OOM row its card over the predicted device figure (a
// lower bound of its true ratio).
std::optional<double> RatioOf(const KindObservation& o) {
  if (o.measured_gb.has_value()) {
    if (o.predicted_gb <= 0) return std::nullopt;
    return *o.measured_gb / o.predicted_gb;
  }
  if (o.device_gb <= 0 || o.card_gb <= 0) return std::nullopt;
  return o.card_gb / o.device_gb;
}

v1::MemoryMetric Scored(v1::MemoryMetric metric) {
  return metric == v1::UNSTATED ? v1::DEVICE : metric;
}

// The k of each metric of one kind from `observations` (all of one kind),
// leaving out `skip_publication`; 0 where too few (the caller widens).
struct KindKs {
  double allocated = 0, reserved = 0, device = 0, pooled = 0;
  int measurements = 0;
};

KindKs KsOf(const std::vector<const KindObservation*>& observations,
            const std::string& skip_publication,
            const KindBoundOptions& options) {
  std::map<v1::MemoryMetric, std::vector<double>> by_metric;
  std::vector<double> pooled;
  KindKs ks;
  for (const KindObservation* o : observations) {
    if (o->publication == skip_publication) continue;
    const std::optional<double> ratio = RatioOf(*o);
    if (!ratio.has_value()) continue;
    // An OOM row speaks of the device figure.
    const v1::MemoryMetric metric =
        o->measured_gb.has_value() ? Scored(o->metric) : v1::DEVICE;
    by_metric[metric].push_back(*ratio);
    pooled.push_back(*ratio);
    ++ks.measurements;
  }
  const int min = options.min_measurements;
  auto k = [&](v1::MemoryMetric metric) {
    const std::vector<double>& r = by_metric[metric];
    return static_cast<int>(r.size()) >= min ? KOfRatios(r, options.coverage)
                                             : 0.0;
  };
  ks.pooled = static_cast<int>(pooled.size()) >= min
                  ? KOfRatios(pooled, options.coverage)
                  : 0.0;
  ks.allocated = k(v1::ALLOCATED);
  ks.reserved = k(v1::RESERVED);
  ks.device = k(v1::DEVICE);
  return ks;
}

// Fills the bound's k per metric: its own, else the kind's pooled, else
// `widest` (marked).
void SetKs(const KindKs& ks, double widest, v1::SetupKindBound* bound) {
  auto pick = [&](double own) {
    if (own > 0) return own;
    if (ks.pooled > 0) return ks.pooled;
    bound->set_widest(true);
    return widest;
  };
  bound->set_k_allocated(pick(ks.allocated));
  bound->set_k_reserved(pick(ks.reserved));
  bound->set_k_device(pick(ks.device));
  bound->set_measurements(ks.measurements);
}

double WidestOf(const std::map<std::string, KindKs>& ks) {
  double widest = 0;
  for (const auto& [kind, k] : ks) {
    widest = std::max({widest, k.allocated, k.reserved, k.device, k.pooled});
  }
  return widest;
}

std::map<std::string, KindKs> AllKs(
    const std::map<std::string, std::vector<const KindObservation*>>& by_kind,
    const std::string& skip_publication, const KindBoundOptions& options) {
  std::map<std::string, KindKs> ks;
  for (const auto& [kind, observations] : by_kind) {
    ks[kind] = KsOf(observations, skip_publication, options);
  }
  return ks;
}

// The page figures of one kind: each publication's rows judged with the
// bound computed without that publication.
void AddPageFigures(
    const std::string& kind, const std::vector<const KindObservation*>& rows,
    const std::map<std::string, std::vector<const KindObservation*>>& by_kind,
    const KindBoundOptions& options, v1::SetupKindBound* bound) {
  std::set<std::string> publications;
  std::map<std::string, std::map<std::string, KindKs>> without;
  std::vector<double> errors;
  int covered = 0, oom_rows = 0, said_fits = 0;
  for (const KindObservation* o : rows) {
    publications.insert(o->publication);
    auto it = without.find(o->publication);
    if (it == without.end()) {
      it = without
               .emplace(o->publication, AllKs(by_kind, o->publication, options))
               .first;
    }
    v1::SetupKindBound held;
    SetKs(it->second[kind], WidestOf(it->second), &held);
    if (o->measured_gb.has_value()) {
      const v1::MemoryMetric metric = Scored(o->metric);
      // k 0: nothing calibrated without this publication; the estimate.
      const double upper = o->predicted_gb * std::max(1.0, KOf(held, metric));
      if (*o->measured_gb <= upper + 1e-9) ++covered;
      if (*o->measured_gb > 0) {
        errors.push_back(std::abs(o->predicted_gb - *o->measured_gb) /
                         *o->measured_gb);
      }
    } else {
      ++oom_rows;
      const double upper =
          o->device_gb * std::max(1.0, held.k_device()) * options.headroom;
      if (upper <= o->card_gb) {
        ++said_fits;
      } else {
        ++covered;
      }
    }
  }
  bound->set_covered(covered);
  bound->set_oom_rows(oom_rows);
  bound->set_said_fits_but_oom(said_fits);
  bound->set_publications(static_cast<int32_t>(publications.size()));
  bound->set_median_abs_err(Median(errors));
}

// The card a published run on a card the catalog lacks is asked against:
// the one it ran out on, else one no job fills (its figures, not its
// verdict, are compared).
double CardOf(const v1::MeasuredRun& run) {
  return run.has_oom_on_gb() ? run.oom_on_gb() : kUnknownCardGb;
}

std::optional<KindObservation> Observe(const v1::MeasuredRun& run,
                                       const FitPlanner& planner,
                                       const Evidence& evidence) {
  absl::StatusOr<v1::CheckFitResponse> answer =
      planner.CheckFit(RequestForRun(run, CardOf(run)), &evidence);
  if (!answer.ok() || answer->targets().empty() ||
      answer->targets(0).batches().empty()) {
    return std::nullopt;
  }
  const v1::MemoryFigures& f = answer->targets(0).batches(0).figures();
  KindObservation o;
  o.kind = SetupKind(run.setup());
  o.publication = run.publication();
  o.metric = run.metric() == v1::MEMORY_METRIC_UNSPECIFIED ? v1::ALLOCATED
                                                           : run.metric();
  switch (Scored(o.metric)) {
    case v1::RESERVED:
      o.predicted_gb = f.reserved_gb();
      break;
    case v1::DEVICE:
      o.predicted_gb = f.device_gb();
      break;
    default:
      o.predicted_gb = f.allocated_gb();
  }
  o.device_gb = f.device_gb();
  if (run.has_measured_peak_gb()) {
    o.measured_gb = run.measured_peak_gb();
  } else {
    o.card_gb = run.oom_on_gb();
  }
  return o;
}

bool IsPublished(const v1::MeasuredRun& run) {
  return MeasuredBy(run) == v1::PUBLISHED;
}

}  // namespace

std::string SetupKind(const v1::TrainingSetup& setup) {
  std::string kind = "1gpu";
  if (setup.gpus() > 1) {
    kind = absl::StrCat("multi/", StrategyName(LayoutOf(setup).strategy));
  }
  if (setup.quant_base() != v1::TrainingSetup::BASE_QUANT_UNSPECIFIED) {
    absl::StrAppend(&kind, "/qlora");
  } else if (setup.lora().rank() > 0) {
    absl::StrAppend(&kind, "/lora");
  } else {
    absl::StrAppend(&kind, "/full");
  }
  if (setup.offload() != v1::TrainingSetup::OFFLOAD_UNSPECIFIED) {
    absl::StrAppend(&kind, "+offload");
  }
  return kind;
}

double KOf(const v1::SetupKindBound& bound, v1::MemoryMetric metric) {
  switch (metric) {
    case v1::RESERVED:
      return bound.k_reserved();
    case v1::DEVICE:
    case v1::UNSTATED:
      return bound.k_device();
    default:
      return bound.k_allocated();
  }
}

std::vector<v1::SetupKindBound> KindBounds(
    const std::vector<KindObservation>& observations,
    const std::vector<std::string>& measured_kinds,
    const KindBoundOptions& options) {
  std::map<std::string, std::vector<const KindObservation*>> by_kind;
  for (const KindObservation& o : observations) {
    by_kind[o.kind].push_back(&o);
  }
  const std::map<std::string, KindKs> ks = AllKs(by_kind, "", options);
  const double widest = WidestOf(ks);
  std::vector<v1::SetupKindBound> bounds;
  for (const auto& [kind, rows] : by_kind) {
    v1::SetupKindBound bound;
    bound.set_kind(kind);
    SetKs(ks.at(kind), widest, &bound);
    AddPageFigures(kind, rows, by_kind, options, &bound);
    if (bound.widest()) {
      bound.set_note(absl::StrCat(
          "too few held-out measurements (", bound.measurements(), " < ",
          options.min_measurements, "): the widest k of all kinds"));
    }
    bounds.push_back(std::move(bound));
  }
  for (const std::string& kind : measured_kinds) {
    if (by_kind.count(kind) > 0) continue;
    v1::SetupKindBound bound;
    bound.set_kind(kind);
    bound.set_note(
        "measured runs of this kind: the prior's held-out k (no published "
        "row)");
    bounds.push_back(std::move(bound));
  }
  std::sort(bounds.begin(), bounds.end(),
            [](const v1::SetupKindBound& a, const v1::SetupKindBound& b) {
              return a.kind() < b.kind();
            });
  return bounds;
}

std::optional<v1::SetupKindBound> BoundFor(
    const google::protobuf::RepeatedPtrField<v1::SetupKindBound>& bounds,
    const std::string& kind) {
  if (bounds.empty()) return std::nullopt;
  double widest = 0;
  for (const v1::SetupKindBound& bound : bounds) {
    if (bound.kind() == kind) return bound;
    widest = std::max(
        {widest, bound.k_allocated(), bound.k_reserved(), bound.k_device()});
  }
  v1::SetupKindBound untested;
  untested.set_kind(kind);
  untested.set_k_allocated(widest);
  untested.set_k_reserved(widest);
  untested.set_k_device(widest);
  untested.set_widest(true);
  untested.set_untested(true);
  untested.set_note(
      "no measured or published run of this kind: the widest k of all "
      "kinds, and never FITS");
  return untested;
}

std::string FrameworkKind(const std::string& kind,
                          v1::TrainingSetup::Framework framework) {
  if (framework == v1::TrainingSetup::FRAMEWORK_UNSPECIFIED ||
      framework == v1::TrainingSetup::GENERIC) {
    return kind;
  }
  return absl::StrCat(kind, "@", FrameworkName(framework));
}

std::optional<v1::SetupKindBound> BoundForSetup(
    const google::protobuf::RepeatedPtrField<v1::SetupKindBound>& bounds,
    const v1::TrainingSetup& setup) {
  const std::string kind = SetupKind(setup);
  const std::string own = FrameworkKind(kind, setup.framework());
  if (own != kind) {
    for (const v1::SetupKindBound& bound : bounds) {
      if (bound.kind() == own && !bound.widest()) return bound;
    }
    return BoundFor(bounds, kind);
  }
  std::optional<v1::SetupKindBound> pooled = BoundFor(bounds, kind);
  if (!pooled.has_value() || pooled->untested()) return pooled;
  const std::string prefix = absl::StrCat(kind, "@");
  std::string widened_by;
  for (const v1::SetupKindBound& bound : bounds) {
    if (!absl::StartsWith(bound.kind(), prefix) || bound.widest()) continue;
    bool wider = false;
    if (bound.k_allocated() > pooled->k_allocated()) {
      pooled->set_k_allocated(bound.k_allocated());
      wider = true;
    }
    if (bound.k_reserved() > pooled->k_reserved()) {
      pooled->set_k_reserved(bound.k_reserved());
      wider = true;
    }
    if (bound.k_device() > pooled->k_device()) {
      pooled->set_k_device(bound.k_device());
      wider = true;
    }
    if (wider) widened_by = bound.kind();
  }
  if (!widened_by.empty()) {
    pooled->set_note(absl::StrCat(
        "no framework named (generic): the kind's bound widened to its "
        "frameworks' largest k (",
        widened_by, "); --framework names the one that runs the job"));
  }
  return pooled;
}

absl::StatusOr<std::vector<v1::SetupKindBound>> CalibrateKindBounds(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& runs,
    const ModelCatalog& catalog, const KindBoundOptions& options) {
  v1::FactorSet unbounded = set;
  unbounded.clear_kind_bounds();
  const FitPlanner planner(
      std::shared_ptr<const ModelCatalog>(&catalog, [](const ModelCatalog*) {}),
      unbounded, kAnswerCoverage);
  AnchorOptions anchor_options;
  anchor_options.device_costs = &set.device_costs();

  std::set<std::string> measured_kinds;
  std::map<std::string, std::vector<size_t>> by_publication;
  // Every usable published row by publication, spec or not: what anchors
  // the other publications' answers.
  std::map<std::string, std::vector<size_t>> rows_of;
  std::vector<v1::MeasuredRun> others;
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run) || run.simulated()) continue;
    if (IsPublished(run)) {
      if (run.has_spec()) by_publication[run.publication()].push_back(i);
      rows_of[run.publication()].push_back(i);
      continue;
    }
    others.push_back(run);
    measured_kinds.insert(SetupKind(
        run.has_setup() ? run.setup() : v1::TrainingSetup::default_instance()));
  }
  // A publication whose models no other row shares is answered on the
  // measured runs' evidence alone; only the others need their own.
  std::map<size_t, std::string> key_of;
  std::map<std::string, std::set<std::string>> publications_of_key;
  for (const auto& [publication, indices] : by_publication) {
    for (size_t i : indices) {
      absl::StatusOr<ModelKey> key =
          planner.KeyOf(RequestForRun(runs[i], CardOf(runs[i])));
      key_of[i] = key.ok() ? key->canonical : absl::StrCat("#", i);
      publications_of_key[key_of[i]].insert(publication);
    }
  }
  const std::shared_ptr<const Evidence> base =
      Evidence::Build(others, catalog, planner.priors(), anchor_options);
  std::vector<KindObservation> observations;
  for (const auto& [publication, indices] : by_publication) {
    bool shared = false;
    for (size_t i : indices) {
      shared |= publications_of_key[key_of[i]].size() > 1;
    }
    std::shared_ptr<const Evidence> evidence = base;
    if (shared) {
      // The other publications' rows added to the measured runs' evidence
      // (Evidence::WithRuns: their groups fitted under its calibration,
      // which published rows do not enter), not a rebuild of every run per
      // publication: the cost is the published rows'.
      std::vector<v1::MeasuredRun> others_published;
      for (const auto& [other, other_indices] : rows_of) {
        if (other == publication) continue;
        for (size_t i : other_indices) others_published.push_back(runs[i]);
      }
      evidence = base->WithRuns(others_published, catalog, planner.priors(),
                                anchor_options);
    }
    for (size_t i : indices) {
      std::optional<KindObservation> o = Observe(runs[i], planner, *evidence);
      if (!o.has_value()) continue;
      // Counted again under its framework's own kind.
      const std::string own =
          FrameworkKind(o->kind, runs[i].setup().framework());
      if (own != o->kind) {
        observations.push_back(*o);
        observations.back().kind = own;
      }
      observations.push_back(*std::move(o));
    }
  }
  return KindBounds(observations,
                    {measured_kinds.begin(), measured_kinds.end()}, options);
}

}  // namespace headroom
