#include "core/energy/energy_refit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/input_limits.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/energy/energy_curves.h"
#include "core/evidence/run_checks.h"

namespace headroom {
namespace {

constexpr double kGridPerDecade = 400;
constexpr int kGoldenIterations = 100;
constexpr double kRangeFactor = 10;

struct Solution {
  double ssr = 0;
  double a = 0;
  double s = 0;
};

double G(double n_b, double nstar) {
  const double x = n_b / nstar;
  return x / (1 + x);
}

double Ssr(const std::vector<EnergyPoint>& points, const std::vector<double>& g,
           double a, double s) {
  double ssr = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const double r = points[i].de_pct - (a - s * g[i]);
    ssr += r * r;
  }
  return ssr;
}

// min over A, S of sum (y - A + S g)^2 with S >= 0 and S - A <= cap: the
// unconstrained optimum if feasible, else the best of the edge optima.
Solution SolveAtNstar(const std::vector<EnergyPoint>& points, double nstar,
                      double cap) {
  const size_t n = points.size();
  std::vector<double> g(n);
  double mean_g = 0, mean_y = 0;
  for (size_t i = 0; i < n; ++i) {
    g[i] = G(points[i].n_b, nstar);
    mean_g += g[i] / n;
    mean_y += points[i].de_pct / n;
  }
  std::vector<std::pair<double, double>> candidates;  // (A, S)
  double sgg = 0, sgy = 0;
  for (size_t i = 0; i < n; ++i) {
    sgg += (g[i] - mean_g) * (g[i] - mean_g);
    sgy += (g[i] - mean_g) * (points[i].de_pct - mean_y);
  }
  if (sgg > 0) {
    const double s = -sgy / sgg;
    candidates.push_back({mean_y + s * mean_g, s});
  }
  // Edge S = 0: a constant, no lower than -cap.
  candidates.push_back({std::max(mean_y, -cap), 0.0});
  // Edge S - A = cap: y + cap = S (1 - g), S >= 0.
  double shh = 0, shy = 0;
  for (size_t i = 0; i < n; ++i) {
    const double h = 1 - g[i];
    shh += h * h;
    shy += h * (points[i].de_pct + cap);
  }
  if (shh > 0) {
    const double s = std::max(0.0, shy / shh);
    candidates.push_back({s - cap, s});
  }
  Solution best;
  bool found = false;
  for (const auto& [a, s] : candidates) {
    if (s < 0 || s - a > cap * (1 + 1e-12)) continue;
    const double ssr = Ssr(points, g, a, s);
    if (!found || ssr < best.ssr) {
      best = {ssr, a, s};
      found = true;
    }
  }
  return best;  // the S = 0 candidate is always feasible
}

std::optional<double> Mae(const std::vector<EnergyPoint>& points,
                          double s_cap) {
  if (static_cast<int>(points.size()) < kMinCurvePoints + 1) {
    return std::nullopt;
  }
  double sum = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    std::vector<EnergyPoint> rest = points;
    rest.erase(rest.begin() + k);
    absl::StatusOr<CurveFit> fit = FitCurve(rest, s_cap, "leave-one-out");
    if (!fit.ok()) return std::nullopt;  // e.g. the rest share one N
    const double x = points[k].n_b / fit->nstar;
    sum += std::fabs(points[k].de_pct - (fit->a - fit->s * x / (1 + x)));
  }
  return sum / points.size();
}

// Mean absolute error at the first `first_n` points of `points`, each
// predicted by the curve fitted to all the others; nullopt when a point
// left out leaves too few to fit.
std::optional<double> HeldOutMae(const std::vector<EnergyPoint>& points,
                                 size_t first_n, double s_cap) {
  if (static_cast<int>(points.size()) < kMinCurvePoints + 1 || first_n == 0) {
    return std::nullopt;
  }
  double sum = 0;
  for (size_t k = 0; k < first_n; ++k) {
    std::vector<EnergyPoint> rest = points;
    rest.erase(rest.begin() + k);
    absl::StatusOr<CurveFit> fit = FitCurve(rest, s_cap, "held out");
    if (!fit.ok()) return std::nullopt;
    const double x = points[k].n_b / fit->nstar;
    sum += std::fabs(points[k].de_pct - (fit->a - fit->s * x / (1 + x)));
  }
  return sum / first_n;
}

std::vector<EnergyPoint> PointsOf(const v1::EnergyCurve& curve) {
  std::vector<EnergyPoint> points;
  for (const v1::EnergyAnchor& anchor : curve.anchors()) {
    points.push_back({anchor.n(), anchor.de(), anchor.model(), anchor.gpu()});
  }
  return points;
}

v1::CurveFitSummary Summarize(const std::string& arch, const std::string& quant,
                              const v1::EnergyCurve& curve, const CurveFit* fit,
                              const v1::EnergyCurve* previous) {
  v1::CurveFitSummary summary;
  summary.set_arch(arch);
  summary.set_quant(quant);
  summary.set_points(curve.anchors_size());
  summary.set_a(curve.a());
  summary.set_s(curve.s());
  summary.set_nstar(curve.nstar());
  summary.set_resid_std(curve.resid_std());
  if (curve.has_loo_mae()) summary.set_loo_mae(curve.loo_mae());
  if (previous != nullptr) {
    summary.set_previous_resid_std(previous->resid_std());
    if (previous->has_loo_mae()) {
      summary.set_previous_loo_mae(previous->loo_mae());
    }
  }
  if (fit != nullptr) {
    summary.set_nstar_lo(fit->nstar_lo);
    summary.set_nstar_hi(fit->nstar_hi);
    summary.set_nstar_at_edge(fit->nstar_at_edge);
    summary.set_s_at_zero(fit->s_at_zero);
    summary.set_saving_at_cap(fit->saving_at_cap);
    summary.set_refit(true);
  }
  return summary;
}

v1::EnergyCurve* MutableCurve(v1::QuantCurves* curves, Quant quant) {
  return quant == Quant::kNf4 ? curves->mutable_nf4() : curves->mutable_int8();
}

const v1::EnergyCurve* CurveIn(const v1::EnergyCurveSet& set,
                               const std::string& arch, Quant quant) {
  if (!set.curves().contains(arch)) return nullptr;
  const v1::QuantCurves& curves = set.curves().at(arch);
  if (quant == Quant::kNf4) return curves.has_nf4() ? &curves.nf4() : nullptr;
  if (quant == Quant::kInt8) {
    return curves.has_int8() ? &curves.int8() : nullptr;
  }
  return nullptr;
}

// The architectures with curves, sorted: protobuf maps iterate in no fixed
// order, and the summaries must come out the same every time.
std::vector<std::string> SortedArchs(const v1::EnergyCurveSet& set) {
  std::vector<std::string> archs;
  for (const auto& entry : set.curves()) archs.push_back(entry.first);
  std::sort(archs.begin(), archs.end());
  return archs;
}

// Mean J per 1k generated tokens of a group of runs.
struct Group {
  double j_per_1k_sum = 0;
  int runs = 0;
  double Mean() const { return j_per_1k_sum / runs; }
};

}  // namespace

absl::StatusOr<CurveFit> FitCurve(const std::vector<EnergyPoint>& points,
                                  double s_cap, absl::string_view what) {
  if (static_cast<int>(points.size()) < kMinCurvePoints) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refit of ", what, " needs at least ", kMinCurvePoints,
        " points (A, S and Nstar are fitted); got ", points.size()));
  }
  if (!(s_cap > 0 && s_cap <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refit of ", what, ": s_cap must be in (0, 100]; got ", s_cap));
  }
  double n_min = points[0].n_b, n_max = points[0].n_b;
  for (const EnergyPoint& p : points) {
    if (!(p.n_b > 0 && p.n_b <= kMaxParamsB) || !std::isfinite(p.de_pct)) {
      return absl::InvalidArgumentError(
          absl::StrCat("refit of ", what, ": point '", p.model, "' has N ",
                       p.n_b, " and dE ", p.de_pct, "; need N in (0, ",
                       kMaxParamsB, "] and a finite dE"));
    }
    n_min = std::min(n_min, p.n_b);
    n_max = std::max(n_max, p.n_b);
  }
  if (n_min == n_max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refit of ", what,
        " needs points at two or more sizes; all are at N = ", n_min));
  }
  CurveFit fit;
  fit.nstar_lo = n_min / kRangeFactor;
  fit.nstar_hi = n_max * kRangeFactor;
  const double log_lo = std::log(fit.nstar_lo);
  const double log_hi = std::log(fit.nstar_hi);
  const int steps = static_cast<int>(
      std::ceil(kGridPerDecade * (log_hi - log_lo) / std::log(10.0)));
  auto nstar_at = [&](double t) {
    return std::exp(log_lo + t * (log_hi - log_lo));
  };

  // Grid, scanning downwards so that a tie keeps the larger Nstar.
  int best_step = steps;
  Solution best = SolveAtNstar(points, fit.nstar_hi, s_cap);
  for (int i = steps - 1; i >= 0; --i) {
    const Solution sol =
        SolveAtNstar(points, nstar_at(static_cast<double>(i) / steps), s_cap);
    if (sol.ssr < best.ssr) {
      best = sol;
      best_step = i;
    }
  }
  double best_t = static_cast<double>(best_step) / steps;
  // Golden section on log Nstar between the neighbouring grid points; kept
  // only where it improves on the grid.
  double lo = static_cast<double>(std::max(best_step - 1, 0)) / steps;
  double hi = static_cast<double>(std::min(best_step + 1, steps)) / steps;
  const double ratio = (std::sqrt(5.0) - 1) / 2;
  double c = hi - ratio * (hi - lo), d = lo + ratio * (hi - lo);
  Solution sc = SolveAtNstar(points, nstar_at(c), s_cap);
  Solution sd = SolveAtNstar(points, nstar_at(d), s_cap);
  for (int it = 0; it < kGoldenIterations; ++it) {
    if (sc.ssr < sd.ssr) {
      hi = d;
      d = c;
      sd = sc;
      c = hi - ratio * (hi - lo);
      sc = SolveAtNstar(points, nstar_at(c), s_cap);
    } else {
      lo = c;
      c = d;
      sc = sd;
      d = lo + ratio * (hi - lo);
      sd = SolveAtNstar(points, nstar_at(d), s_cap);
    }
  }
  const double mid = (lo + hi) / 2;
  const Solution refined = SolveAtNstar(points, nstar_at(mid), s_cap);
  if (refined.ssr < best.ssr) {
    best = refined;
    best_t = mid;
  }
  fit.a = best.a;
  fit.s = best.s;
  fit.s_at_zero = best.s <= 0;
  // With S = 0 the fit does not depend on Nstar: report the top of the range.
  fit.nstar = fit.s_at_zero ? fit.nstar_hi : nstar_at(best_t);
  fit.nstar_at_edge =
      !fit.s_at_zero && (best_t <= 1.0 / steps || best_t >= 1 - 1.0 / steps);
  fit.saving_at_cap = std::fabs(best.s - best.a - s_cap) <= 1e-9 * s_cap;
  fit.resid_std = std::sqrt(best.ssr / points.size());
  return fit;
}

std::optional<double> LeaveOneOutMae(const std::vector<EnergyPoint>& points,
                                     double s_cap) {
  return Mae(points, s_cap);
}

absl::StatusOr<v1::EnergyCurve> FitEnergyCurve(
    const std::vector<EnergyPoint>& points, double s_cap,
    absl::string_view what) {
  ASSIGN_OR_RETURN(const CurveFit fit, FitCurve(points, s_cap, what));
  v1::EnergyCurve curve;
  curve.set_a(fit.a);
  curve.set_s(fit.s);
  curve.set_nstar(fit.nstar);
  curve.set_resid_std(fit.resid_std);
  std::vector<EnergyPoint> sorted = points;
  std::stable_sort(
      sorted.begin(), sorted.end(),
      [](const EnergyPoint& x, const EnergyPoint& y) { return x.n_b < y.n_b; });
  curve.set_n_min(sorted.front().n_b);
  curve.set_n_max(sorted.back().n_b);
  if (std::optional<double> crossover = CrossoverB(fit.a, fit.s, fit.nstar)) {
    curve.set_crossover_b(*crossover);
  }
  for (const EnergyPoint& p : sorted) {
    v1::EnergyAnchor* anchor = curve.add_anchors();
    anchor->set_n(p.n_b);
    anchor->set_de(p.de_pct);
    anchor->set_model(p.model);
    anchor->set_gpu(p.gpu);
  }
  if (std::optional<double> mae = Mae(sorted, s_cap)) curve.set_loo_mae(*mae);
  return curve;
}

absl::StatusOr<v1::RefitEnergyResponse> RefitFromAnchors(
    const v1::EnergyCurveSet& base) {
  v1::RefitEnergyResponse response;
  v1::EnergyCurveSet* set = response.mutable_curve_set();
  *set = base;
  set->clear_version();
  set->set_trained_on("anchors of the curve set " + base.version());
  for (const std::string& arch : SortedArchs(base)) {
    v1::QuantCurves& curves = (*set->mutable_curves())[arch];
    for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
      const v1::EnergyCurve* previous = CurveIn(base, arch, quant);
      if (previous == nullptr) continue;
      const std::string what = absl::StrCat(arch, " ", QuantKey(quant));
      const std::vector<EnergyPoint> points = PointsOf(*previous);
      const double cap = base.s_cap().at(QuantKey(quant));
      ASSIGN_OR_RETURN(const CurveFit fit, FitCurve(points, cap, what));
      ASSIGN_OR_RETURN(v1::EnergyCurve curve,
                       FitEnergyCurve(points, cap, what));
      *MutableCurve(&curves, quant) = curve;
      *response.add_curves() =
          Summarize(arch, QuantKey(quant), curve, &fit, previous);
    }
  }
  return response;
}

namespace {

// (arch, gpu, model, N) -> mean J/1k; one map per quantization.
using RunKey = std::tuple<std::string, std::string, std::string, double>;
using RunGroups = std::array<std::map<RunKey, Group>, 3>;
// dE points per (arch, quant).
using DePoints =
    std::map<std::pair<std::string, Quant>, std::vector<EnergyPoint>>;

// The request's runs grouped: INVALID_ARGUMENT naming the run for one that
// CheckEnergyRun refuses or whose J per 1,000 tokens is out of range.
absl::Status GroupRuns(const v1::RefitEnergyRequest& request,
                       RunGroups* groups) {
  for (int i = 0; i < request.runs_size(); ++i) {
    const v1::EnergyRun& run = request.runs(i);
    const std::string index = absl::StrCat("runs[", i, "]");
    RETURN_IF_ERROR(CheckEnergyRun(run, index));
    const std::string where = absl::StrCat(index, " (", run.model(), ")");
    const GpuInfo gpu = *FindGpu(run.gpu());
    const Quant quant = *ParseQuant(run.quant());
    const double joules = request.subtract_idle()
                              ? run.energy_j() - run.idle_w() * run.window_s()
                              : run.energy_j();
    if (!(joules > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": energy_j",
                       request.subtract_idle() ? " - idle_w * window_s" : "",
                       " must be > 0; got ", joules));
    }
    const double j_per_1k = joules * 1000 / run.tokens_generated();
    if (!(j_per_1k <= kMaxJPer1kTokens)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": energy_j",
          request.subtract_idle() ? " - idle_w * window_s" : "",
          " per 1,000 tokens_generated is ", j_per_1k, " J; allowed (0, ",
          kMaxJPer1kTokens, "] J per 1,000 tokens"));
    }
    Group& group = (*groups)[static_cast<int>(quant)]
                            [{gpu.arch, gpu.name, run.model(), run.params_b()}];
    group.j_per_1k_sum += j_per_1k;
    ++group.runs;
  }
  return absl::OkStatus();
}

// fp16 anchors per architecture: the mean over GPUs of that architecture,
// replacing (merge_anchors) or else all of the set's anchors.
void SetFp16Anchors(const std::map<RunKey, Group>& fp16, bool merge_anchors,
                    v1::EnergyCurveSet* set) {
  std::map<std::string, std::map<double, std::pair<Group, std::string>>>
      fp16_points;
  for (const auto& [key, group] : fp16) {
    const auto& [arch, gpu, model, n_b] = key;
    auto& entry = fp16_points[arch][n_b];
    entry.first.j_per_1k_sum += group.Mean();
    ++entry.first.runs;
    entry.second = entry.second.empty() ? model : entry.second;
  }
  for (const auto& [arch, by_n] : fp16_points) {
    v1::Fp16Energy& energy = (*set->mutable_fp16_energy())[arch];
    std::map<double, v1::Fp16Anchor> anchors;
    if (merge_anchors) {
      for (const v1::Fp16Anchor& a : energy.anchors()) anchors[a.n()] = a;
    }
    for (const auto& [n_b, entry] : by_n) {
      v1::Fp16Anchor anchor;
      anchor.set_n(n_b);
      anchor.set_e_j1k(entry.first.Mean());
      anchor.set_model(entry.second);
      anchors[n_b] = anchor;
    }
    energy.clear_anchors();
    for (const auto& [n_b, anchor] : anchors) *energy.add_anchors() = anchor;
    energy.set_n_min(anchors.begin()->first);
    energy.set_n_max(anchors.rbegin()->first);
  }
}

// Each quantized run's dE against the fp16 run of the same model on the
// same GPU; INVALID_ARGUMENT for one without a partner or out of range.
absl::StatusOr<DePoints> DePointsOf(const RunGroups& groups) {
  const std::map<RunKey, Group>& fp16 = groups[static_cast<int>(Quant::kFp16)];
  DePoints points;
  for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
    for (const auto& [key, group] : groups[static_cast<int>(quant)]) {
      const auto& [arch, gpu, model, n_b] = key;
      auto partner = fp16.find(key);
      if (partner == fp16.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "run of ", model, " (", QuantName(quant), ") on ", gpu,
            " has no fp16 run of the same model on the same GPU to compare "
            "against"));
      }
      const double de_pct = 100 * (group.Mean() / partner->second.Mean() - 1);
      if (!(de_pct <= kMaxDePct)) {
        return absl::InvalidArgumentError(
            absl::StrCat("run of ", model, " (", QuantName(quant), ") on ", gpu,
                         " uses ", group.Mean() / partner->second.Mean(),
                         " times the energy of its fp16 run (dE = ", de_pct,
                         " %); allowed dE up to ", kMaxDePct, " %"));
      }
      points[{arch, quant}].push_back({n_b, de_pct, model, gpu});
    }
  }
  return points;
}

// Refits one curve on the new points (with the base's others unless
// replaced, under merge_anchors) into `set`; the summary says how it
// moved.
absl::StatusOr<v1::CurveFitSummary> RefitCurve(
    const v1::EnergyCurveSet& base, const std::string& arch, Quant quant,
    const std::vector<EnergyPoint>& new_points, bool merge_anchors,
    v1::EnergyCurveSet* set) {
  const v1::EnergyCurve* previous = CurveIn(base, arch, quant);
  std::vector<EnergyPoint> all = new_points;
  if (merge_anchors && previous != nullptr) {
    for (const EnergyPoint& old : PointsOf(*previous)) {
      const bool replaced = std::any_of(
          new_points.begin(), new_points.end(),
          [&](const EnergyPoint& p) { return p.model == old.model; });
      if (!replaced) all.push_back(old);
    }
  }
  const std::string what = absl::StrCat(arch, " ", QuantKey(quant));
  const double cap = base.s_cap().at(QuantKey(quant));
  ASSIGN_OR_RETURN(const CurveFit fit, FitCurve(all, cap, what));
  ASSIGN_OR_RETURN(v1::EnergyCurve curve, FitEnergyCurve(all, cap, what));
  *MutableCurve(&(*set->mutable_curves())[arch], quant) = curve;
  v1::CurveFitSummary summary =
      Summarize(arch, QuantKey(quant), curve, &fit, previous);
  // Held out on the new points: the refit without each point in turn,
  // and the current set's curve (its own or borrowed), which never saw
  // them.
  if (std::optional<double> heldout = HeldOutMae(all, new_points.size(), cap)) {
    summary.set_heldout_mae(*heldout);
  }
  std::string borrowed_from;
  if (absl::StatusOr<const v1::EnergyCurve*> current =
          FindCurve(base, arch, quant, &borrowed_from);
      current.ok()) {
    double sum = 0;
    for (const EnergyPoint& p : new_points) {
      sum += std::fabs(p.de_pct - DePct(**current, p.n_b));
    }
    summary.set_current_heldout_mae(sum / new_points.size());
  }
  return summary;
}

}  // namespace

absl::StatusOr<v1::RefitEnergyResponse> RefitEnergy(
    const v1::EnergyCurveSet& base, const v1::RefitEnergyRequest& request,
    const std::string& trained_on) {
  if (request.runs().empty()) {
    return absl::InvalidArgumentError("runs is empty; nothing to refit from");
  }
  RunGroups groups;
  RETURN_IF_ERROR(GroupRuns(request, &groups));

  v1::RefitEnergyResponse response;
  v1::EnergyCurveSet* set = response.mutable_curve_set();
  *set = base;
  set->clear_version();
  set->set_trained_on(trained_on);

  SetFp16Anchors(groups[static_cast<int>(Quant::kFp16)],
                 request.merge_anchors(), set);
  ASSIGN_OR_RETURN(const DePoints points, DePointsOf(groups));
  std::set<std::pair<std::string, Quant>> refit;
  for (const auto& [curve_key, new_points] : points) {
    const auto& [arch, quant] = curve_key;
    ASSIGN_OR_RETURN(*response.add_curves(),
                     RefitCurve(base, arch, quant, new_points,
                                request.merge_anchors(), set));
    refit.insert(curve_key);
  }
  for (const std::string& arch : SortedArchs(base)) {
    for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
      const v1::EnergyCurve* curve = CurveIn(base, arch, quant);
      if (curve == nullptr || refit.count({arch, quant}) > 0) continue;
      *response.add_curves() =
          Summarize(arch, QuantKey(quant), *curve, nullptr, curve);
    }
  }
  RETURN_IF_ERROR(ValidateCurveSet(*set));
  return response;
}

EnergyPromotion DecideEnergyPromotion(const v1::RefitEnergyResponse& refit,
                                      bool force) {
  if (force) return {true, "forced"};
  int judged = 0;
  for (const v1::CurveFitSummary& curve : refit.curves()) {
    if (!curve.refit()) continue;
    ++judged;
    const std::string name = absl::StrCat(curve.arch(), " ", curve.quant());
    if (!curve.has_current_heldout_mae()) continue;  // a new curve
    if (!curve.has_heldout_mae()) {
      return {false,
              absl::StrCat(name, ": too few points to hold one out (",
                           curve.points(), "; need ", kMinCurvePoints + 1,
                           "), so it cannot be shown no worse than the "
                           "current curve; kept (force overrides)")};
    }
    if (curve.heldout_mae() > curve.current_heldout_mae()) {
      return {false,
              absl::StrCat(name, ": held-out error ", curve.heldout_mae(),
                           " pp is worse than the current curve's ",
                           curve.current_heldout_mae(),
                           " pp on the same points; kept (force overrides)")};
    }
  }
  if (judged == 0) {
    return {false,
            "no quantized curve was refitted (fp16 runs only); kept (force "
            "overrides)"};
  }
  return {true, absl::StrCat("no worse held out on the ", judged,
                             " refitted curve", judged == 1 ? "" : "s")};
}

absl::StatusOr<std::vector<v1::EnergyRun>> ParseEnergyRunsJsonl(
    absl::string_view text) {
  std::vector<v1::EnergyRun> runs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    v1::EnergyRun run;
    RETURN_IF_ERROR(ParseJson(line,
                              absl::StrCat("energy runs line ", line_number),
                              /*ignore_unknown=*/false, &run));
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace headroom
