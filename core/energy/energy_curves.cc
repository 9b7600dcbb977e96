#include "core/energy/energy_curves.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"

namespace headroom {
namespace {

// crossover_b is printed to 3 decimals; half the last digit, plus slack for
// the rounding of A, S and Nstar themselves.
constexpr double kCrossoverTolerance = 5e-4 + 1e-9;

// A saving of s_cap exactly is allowed; the fit lands on it.
constexpr double kCapSlack = 1e-9;

std::string FormatNumber(double value) { return absl::StrCat(value); }

absl::Status ValidateCurve(const v1::EnergyCurve& curve,
                           const std::string& where, double s_cap) {
  if (!(curve.nstar() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".Nstar must be > 0; got ", curve.nstar()));
  }
  if (!(curve.s() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".S must be >= 0; got ", curve.s()));
  }
  if (!std::isfinite(curve.a())) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".A is not finite"));
  }
  if (curve.s() - curve.a() > s_cap + kCapSlack) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": saving S - A = ", curve.s() - curve.a(), " exceeds s_cap ",
        s_cap, " (dE% must stay >= -s_cap at every N)"));
  }
  if (!(curve.n_min() > 0) || !(curve.n_min() <= curve.n_max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": need 0 < n_min <= n_max; got [", curve.n_min(),
                     ", ", curve.n_max(), "]"));
  }
  if (curve.anchors().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".anchors is empty; need at least one"));
  }
  for (const v1::EnergyAnchor& anchor : curve.anchors()) {
    if (!(anchor.n() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": anchor '", anchor.model(), "' has N ",
                       anchor.n(), "; must be > 0"));
    }
  }
  if (!(curve.resid_std() >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".resid_std must be >= 0"));
  }
  const std::optional<double> crossover = CrossoverB(curve);
  if (curve.has_crossover_b() != crossover.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ".crossover_b is ",
        curve.has_crossover_b() ? FormatNumber(curve.crossover_b()) : "null",
        " but the curve ",
        crossover ? absl::StrCat("crosses zero at N = ", *crossover)
                  : std::string("never crosses zero")));
  }
  if (crossover &&
      std::fabs(*crossover - curve.crossover_b()) > kCrossoverTolerance) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".crossover_b is ", curve.crossover_b(),
                     " but the curve crosses zero at N = ", *crossover));
  }
  return absl::OkStatus();
}

absl::Status ValidateFp16(const v1::Fp16Energy& fp16,
                          const std::string& where) {
  if (fp16.anchors().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".anchors is empty; need at least one"));
  }
  double previous = 0;
  for (const v1::Fp16Anchor& anchor : fp16.anchors()) {
    if (!(anchor.n() > previous)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": anchor N must be positive and strictly increasing; got ",
          anchor.n(), " after ", previous));
    }
    if (!(anchor.e_j1k() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": anchor at N = ", anchor.n(), " has e_j1k ",
                       anchor.e_j1k(), "; must be > 0"));
    }
    previous = anchor.n();
  }
  return absl::OkStatus();
}

const v1::EnergyCurve* CurveOf(const v1::QuantCurves& curves, Quant quant) {
  switch (quant) {
    case Quant::kNf4:
      return curves.has_nf4() ? &curves.nf4() : nullptr;
    case Quant::kInt8:
      return curves.has_int8() ? &curves.int8() : nullptr;
    case Quant::kFp16:
      return nullptr;
  }
  return nullptr;
}

// Quantizations with a curve for `arch` (own or borrowed), for messages.
std::vector<std::string> QuantsFor(const v1::EnergyCurveSet& set,
                                   const std::string& arch) {
  std::vector<std::string> names = {"fp16"};
  std::string source = arch;
  if (!set.curves().contains(source) && set.borrow().contains(arch)) {
    source = set.borrow().at(arch);
  }
  if (set.curves().contains(source)) {
    const v1::QuantCurves& curves = set.curves().at(source);
    if (curves.has_nf4()) names.push_back("nf4");
    if (curves.has_int8()) names.push_back("int8");
  }
  return names;
}

// Least-squares slope of log J on log N, and the RMS of its residuals.
struct LogLogFit {
  double slope = 1;
  double rms = 0;
};

LogLogFit FitLogLog(const v1::Fp16Energy& fp16) {
  LogLogFit fit;
  const int n = fp16.anchors_size();
  if (n < 2) return fit;  // one point: proportional to N, spread unknown (0)
  double mean_x = 0, mean_y = 0;
  for (const v1::Fp16Anchor& a : fp16.anchors()) {
    mean_x += std::log(a.n()) / n;
    mean_y += std::log(a.e_j1k()) / n;
  }
  double sxx = 0, sxy = 0;
  for (const v1::Fp16Anchor& a : fp16.anchors()) {
    const double dx = std::log(a.n()) - mean_x;
    sxx += dx * dx;
    sxy += dx * (std::log(a.e_j1k()) - mean_y);
  }
  fit.slope = sxy / sxx;
  double ssr = 0;
  for (const v1::Fp16Anchor& a : fp16.anchors()) {
    const double r =
        std::log(a.e_j1k()) - mean_y - fit.slope * (std::log(a.n()) - mean_x);
    ssr += r * r;
  }
  fit.rms = std::sqrt(ssr / n);
  return fit;
}

absl::Status CheckParamsB(double params_b) {
  if (!(params_b > 0) || !(params_b <= kMaxParamsB)) {
    return absl::InvalidArgumentError(
        absl::StrCat("params_b must be in (0, ", kMaxParamsB,
                     "] billion parameters; got ", params_b));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Quant> ParseQuant(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "fp16") return Quant::kFp16;
  if (lower == "nf4") return Quant::kNf4;
  if (lower == "int8") return Quant::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("quant '", name.substr(0, 32),
                   "' is not known; allowed: fp16, nf4, int8"));
}

std::string QuantName(Quant quant) {
  switch (quant) {
    case Quant::kFp16:
      return "fp16";
    case Quant::kNf4:
      return "nf4";
    case Quant::kInt8:
      return "int8";
  }
  return "";
}

std::string QuantKey(Quant quant) {
  return absl::AsciiStrToUpper(QuantName(quant));
}

absl::StatusOr<v1::EnergyCurveSet> ParseCurveSet(absl::string_view json,
                                                 absl::string_view what) {
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(ParseJson(json, what, /*ignore_unknown=*/false, &set));
  if (set.version().empty()) set.set_version("shipped");
  absl::Status status = ValidateCurveSet(set);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", status.message()));
  }
  return set;
}

absl::Status ValidateCurveSet(const v1::EnergyCurveSet& set) {
  for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
    const std::string key = QuantKey(quant);
    if (!set.s_cap().contains(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("s_cap has no entry for ", key));
    }
    const double cap = set.s_cap().at(key);
    if (!(cap > 0 && cap <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("s_cap.", key, " must be in (0, 100]; got ", cap));
    }
  }
  for (const auto& [arch, curves] : set.curves()) {
    for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
      const v1::EnergyCurve* curve = CurveOf(curves, quant);
      if (curve == nullptr) continue;
      RETURN_IF_ERROR(ValidateCurve(
          *curve, absl::StrCat("curves.", arch, ".", QuantKey(quant)),
          set.s_cap().at(QuantKey(quant))));
    }
    if (!set.fp16_energy().contains(arch)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fp16_energy has no entry for '", arch, "', which has curves"));
    }
  }
  for (const auto& [arch, fp16] : set.fp16_energy()) {
    RETURN_IF_ERROR(ValidateFp16(fp16, absl::StrCat("fp16_energy.", arch)));
  }
  for (const auto& [arch, source] : set.borrow()) {
    if (!set.curves().contains(source)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "borrow.", arch, " is '", source, "', which has no curves"));
    }
  }
  return absl::OkStatus();
}

double DePct(const v1::EnergyCurve& curve, double n_b) {
  const double x = n_b / curve.nstar();
  return curve.a() - curve.s() * x / (1 + x);
}

std::optional<double> CrossoverB(double a, double s, double nstar) {
  // A - S x / (1 + x) = 0  <=>  x = A / (S - A), positive iff 0 < A < S.
  if (!(a > 0 && s > a)) return std::nullopt;
  return nstar * a / (s - a);
}

std::optional<double> CrossoverB(const v1::EnergyCurve& curve) {
  return CrossoverB(curve.a(), curve.s(), curve.nstar());
}

std::vector<std::string> KnownArchs(const v1::EnergyCurveSet& set) {
  std::set<std::string> archs;
  for (const auto& [arch, curves] : set.curves()) archs.insert(arch);
  for (const auto& [arch, source] : set.borrow()) archs.insert(arch);
  return {archs.begin(), archs.end()};
}

absl::StatusOr<const v1::EnergyCurve*> FindCurve(const v1::EnergyCurveSet& set,
                                                 const std::string& arch,
                                                 Quant quant,
                                                 std::string* borrowed_from) {
  borrowed_from->clear();
  if (set.curves().contains(arch)) {
    const v1::EnergyCurve* curve = CurveOf(set.curves().at(arch), quant);
    if (curve != nullptr) return curve;
  }
  if (set.borrow().contains(arch)) {
    const std::string& source = set.borrow().at(arch);
    if (set.curves().contains(source)) {
      const v1::EnergyCurve* curve = CurveOf(set.curves().at(source), quant);
      if (curve != nullptr) {
        *borrowed_from = source;
        return curve;
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("quant '", QuantName(quant), "' has no curve for arch '",
                   arch, "'; allowed for ", arch, ": ",
                   absl::StrJoin(QuantsFor(set, arch), ", ")));
}

absl::StatusOr<Fp16Estimate> Fp16JPer1k(const v1::EnergyCurveSet& set,
                                        const std::string& arch, double n_b) {
  RETURN_IF_ERROR(CheckParamsB(n_b));
  Fp16Estimate estimate;
  std::string source = arch;
  if (!set.fp16_energy().contains(arch)) {
    if (!set.borrow().contains(arch) ||
        !set.fp16_energy().contains(set.borrow().at(arch))) {
      return absl::InvalidArgumentError(
          absl::StrCat("arch '", arch, "' has no fp16 energy anchors"));
    }
    source = set.borrow().at(arch);
    estimate.borrowed_from = source;
  }
  const v1::Fp16Energy& fp16 = set.fp16_energy().at(source);
  const auto& anchors = fp16.anchors();
  const LogLogFit fit = FitLogLog(fp16);
  const double spread = std::exp(fit.rms) - 1;
  for (const v1::Fp16Anchor& anchor : anchors) {
    if (std::fabs(anchor.n() - n_b) <= 1e-9 * anchor.n()) {
      estimate.j_per_1k = anchor.e_j1k();
      estimate.basis = "anchor";
      return estimate;
    }
  }
  const v1::Fp16Anchor& first = anchors[0];
  const v1::Fp16Anchor& last = anchors[anchors.size() - 1];
  if (n_b < first.n() || n_b > last.n()) {
    const v1::Fp16Anchor& end = n_b < first.n() ? first : last;
    estimate.j_per_1k = end.e_j1k() * std::pow(n_b / end.n(), fit.slope);
    estimate.basis = "extrapolated";
    estimate.rel_uncertainty =
        spread * (1 + std::fabs(std::log10(n_b / end.n())));
    return estimate;
  }
  for (int i = 0; i + 1 < anchors.size(); ++i) {
    const v1::Fp16Anchor& lo = anchors[i];
    const v1::Fp16Anchor& hi = anchors[i + 1];
    if (n_b > lo.n() && n_b < hi.n()) {
      const double t = std::log(n_b / lo.n()) / std::log(hi.n() / lo.n());
      estimate.j_per_1k = lo.e_j1k() * std::pow(hi.e_j1k() / lo.e_j1k(), t);
      break;
    }
  }
  estimate.basis = "interpolated";
  estimate.rel_uncertainty = spread;
  return estimate;
}

namespace {

// The arch the request names, directly or by its GPU (a catalog name),
// with the hardware it reports; INVALID_ARGUMENT naming the known archs for
// one without curves or a request with neither.
absl::StatusOr<std::string> RequestArch(
    const v1::EnergyCurveSet& set, const v1::EstimateEnergyRequest& request,
    const std::vector<std::string>& known,
    v1::EstimateEnergyResponse* response) {
  std::string arch;
  switch (request.target_case()) {
    case v1::EstimateEnergyRequest::kGpu: {
      ASSIGN_OR_RETURN(const GpuInfo gpu, FindGpu(request.gpu()));
      arch = gpu.arch;
      response->set_gpu(gpu.name);
      response->set_mem_bw_gb_s(gpu.memory_bandwidth_gb_s);
      response->set_fp16_tflops(gpu.fp16_dense_tflops);
      if (std::find(known.begin(), known.end(), arch) == known.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("gpu '", gpu.name, "' is arch '", arch,
                         "', which has no energy curves; archs with curves: ",
                         absl::StrJoin(known, ", ")));
      }
      break;
    }
    case v1::EstimateEnergyRequest::kArch: {
      arch = absl::AsciiStrToLower(request.arch());
      if (std::find(known.begin(), known.end(), arch) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "arch '", request.arch().substr(0, 32),
            "' is not known; allowed: ", absl::StrJoin(known, ", ")));
      }
      if (set.hardware().contains(arch)) {
        const v1::ArchHardware& hw = set.hardware().at(arch);
        response->set_gpu(hw.gpu());
        response->set_mem_bw_gb_s(hw.mem_bw_gbps());
        response->set_fp16_tflops(hw.fp16_tflops());
      }
      break;
    }
    case v1::EstimateEnergyRequest::TARGET_NOT_SET:
      return absl::InvalidArgumentError(
          "one of gpu (a catalog name) or arch is required; archs: " +
          absl::StrJoin(known, ", "));
  }
  return arch;
}

// The curve's range against N (and how far outside it N lies), and whether
// an anchor measured near N: within a factor of kNearFactor.
void SetRangeAndNearest(double n_b, double n_min, double n_max,
                        const std::vector<double>& anchor_n,
                        v1::EstimateEnergyResponse* response) {
  response->set_n_min(n_min);
  response->set_n_max(n_max);
  const bool below = n_b<n_min, above = n_b> n_max;
  response->set_extrapolated(below || above);
  response->set_extrapolation_b(below ? n_min - n_b : above ? n_b - n_max : 0);
  response->set_extrapolation_ratio(below   ? n_min / n_b
                                    : above ? n_b / n_max
                                            : 1);
  // Measured near N: an anchor within a factor of kNearFactor.
  double nearest = 0, nearest_log = 0;
  for (double a : anchor_n) {
    const double distance = std::fabs(std::log2(n_b / a));
    if (nearest == 0 || distance < nearest_log) {
      nearest = a;
      nearest_log = distance;
    }
  }
  response->set_nearest_anchor_b(nearest);
  response->set_points_near_n(nearest > 0 && nearest_log <=
                                                 std::log2(kNearFactor) + 1e-12
                                  ? "measured"
                                  : "extrapolated");
}

}  // namespace

absl::StatusOr<v1::EstimateEnergyResponse> EstimateEnergy(
    const v1::EnergyCurveSet& set, const v1::EstimateEnergyRequest& request) {
  RETURN_IF_ERROR(CheckParamsB(request.params_b()));
  ASSIGN_OR_RETURN(const Quant quant, ParseQuant(request.quant()));
  const std::vector<std::string> known = KnownArchs(set);
  v1::EstimateEnergyResponse response;
  ASSIGN_OR_RETURN(const std::string arch,
                   RequestArch(set, request, known, &response));
  const double n_b = request.params_b();
  ASSIGN_OR_RETURN(const Fp16Estimate fp16, Fp16JPer1k(set, arch, n_b));

  response.set_arch(arch);
  response.set_quant(QuantName(quant));
  response.set_params_b(n_b);
  response.set_fp16_j_per_1k(fp16.j_per_1k);
  response.set_fp16_basis(
      fp16.borrowed_from.empty()
          ? fp16.basis
          : absl::StrCat(fp16.basis, " (anchors of ", fp16.borrowed_from, ")"));
  response.set_fp16_rel_uncertainty(fp16.rel_uncertainty);
  response.set_curves_version(set.version());

  double n_min = 0, n_max = 0, de = 0, resid = 0;
  std::string borrowed_from = fp16.borrowed_from;
  std::vector<double> anchor_n;  // of the curve that answers
  if (quant == Quant::kFp16) {
    const v1::Fp16Energy& range = set.fp16_energy().at(
        fp16.borrowed_from.empty() ? arch : fp16.borrowed_from);
    n_min = range.n_min();
    n_max = range.n_max();
    for (const v1::Fp16Anchor& a : range.anchors()) anchor_n.push_back(a.n());
  } else {
    ASSIGN_OR_RETURN(const v1::EnergyCurve* curve,
                     FindCurve(set, arch, quant, &borrowed_from));
    n_min = curve->n_min();
    n_max = curve->n_max();
    for (const v1::EnergyAnchor& a : curve->anchors()) {
      anchor_n.push_back(a.n());
    }
    de = DePct(*curve, n_b);
    resid = curve->resid_std();
    if (std::optional<double> crossover = CrossoverB(*curve)) {
      response.set_crossover_b(*crossover);
    }
  }
  if (!borrowed_from.empty()) response.set_borrowed_from(borrowed_from);
  response.set_de_pct(de);
  response.set_resid_std(resid);
  response.set_de_low_pct(de - resid);
  response.set_de_high_pct(de + resid);
  response.set_quant_j_per_1k(fp16.j_per_1k * (1 + de / 100));
  response.set_quant_j_per_1k_low(fp16.j_per_1k * (1 + (de - resid) / 100));
  response.set_quant_j_per_1k_high(fp16.j_per_1k * (1 + (de + resid) / 100));
  SetRangeAndNearest(n_b, n_min, n_max, anchor_n, &response);
  return response;
}

}  // namespace headroom
