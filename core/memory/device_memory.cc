#include "core/memory/device_memory.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/ratios.h"
#include "core/evidence/model_key.h"
#include "core/memory/parallel.h"

namespace headroom {
namespace {

constexpr char kAny[] = "*";
constexpr char kRatio[] = "reserved_ratio";
constexpr char kRatioExpandable[] = "reserved_ratio_expandable";
constexpr char kContext[] = "context_gb";
constexpr char kNcclPrefix[] = "nccl_gb/";

// One run's contribution to a quantity: the value it measured, what that
// value predicts from (allocated for the ratio, reserved for the costs),
// and the figure predicted.
struct Observation {
  std::string model;
  double value = 0;
  double base = 0;
  double measured = 0;
  bool ratio = false;
};

using GroupKey = std::tuple<std::string, std::string, std::string>;

std::string ModelOf(const v1::MeasuredRun& run) {
  return run.template_().empty() ? run.model_key() : run.template_();
}

bool Usable(const v1::MeasuredRun& run) {
  const v1::MeasurementSource source = MeasuredBy(run);
  return run.excluded().empty() && !run.simulated() && source != v1::SIM &&
         source != v1::PUBLISHED && run.has_measured_peak_gb() &&
         !run.has_oom_on_gb() && run.measured_peak_gb() > 0;
}

// The device figure less the reserved one: what the process holds outside
// the allocator (the context; NCCL's communicators too under several GPUs).
std::optional<double> Outside(const v1::MeasuredRun& run) {
  if (run.has_device_peak_gb() && run.has_peak_reserved_gb() &&
      run.device_peak_gb() >= run.peak_reserved_gb()) {
    return run.device_peak_gb() - run.peak_reserved_gb();
  }
  return std::nullopt;
}

void AddObservations(const v1::MeasuredRun& run,
                     std::map<GroupKey, std::vector<Observation>>* groups) {
  const std::string source = SourceName(MeasuredBy(run));
  const std::string& gpu = run.gpu();
  const bool multi = run.setup().gpus() > 1;
  auto add = [&](const std::string& quantity, const Observation& obs) {
    for (const auto& [s, g] : {std::pair<std::string, std::string>{source, gpu},
                               {kAny, gpu},
                               {kAny, kAny}}) {
      (*groups)[{quantity, s, g}].push_back(obs);
    }
  };
  const std::string model = ModelOf(run);
  if (run.has_peak_reserved_gb() &&
      run.peak_reserved_gb() >= run.measured_peak_gb() &&
      run.measured_peak_gb() >= kDeviceFitMinGb) {
    add(run.setup().expandable_segments() ? kRatioExpandable : kRatio,
        {model, run.peak_reserved_gb() / run.measured_peak_gb(),
         run.measured_peak_gb(), run.peak_reserved_gb(), true});
  }
  const std::optional<double> outside = Outside(run);
  if (!multi) {
    if (run.has_device_context_gb() && run.device_context_gb() >= 0) {
      const double device = run.has_device_peak_gb() ? run.device_peak_gb() : 0;
      const double reserved = device - run.device_context_gb();
      add(kContext, {model, run.device_context_gb(), reserved, device, false});
    } else if (outside.has_value()) {
      add(kContext, {model, *outside, run.peak_reserved_gb(),
                     run.device_peak_gb(), false});
    }
  } else if (outside.has_value() && run.has_device_context_gb()) {
    const double nccl = std::max(0.0, *outside - run.device_context_gb());
    add(absl::StrCat(kNcclPrefix, StrategyName(LayoutOf(run.setup()).strategy)),
        {model, nccl, run.peak_reserved_gb() + run.device_context_gb(),
         run.device_peak_gb(), false});
  }
}

v1::DeviceCostFit FitGroup(const GroupKey& key,
                           const std::vector<Observation>& observations) {
  v1::DeviceCostFit fit;
  fit.set_quantity(std::get<0>(key));
  fit.set_source(std::get<1>(key));
  fit.set_gpu(std::get<2>(key));
  std::vector<double> values;
  values.reserve(observations.size());
  for (const Observation& o : observations) values.push_back(o.value);
  fit.set_value(Median(values));
  fit.set_runs(static_cast<int32_t>(observations.size()));
  // Held out by model: each run predicted from the others' median.
  std::vector<double> errors;
  for (const Observation& o : observations) {
    std::vector<double> others;
    for (const Observation& p : observations) {
      if (p.model != o.model) others.push_back(p.value);
    }
    if (others.empty() || o.measured <= 0) continue;
    const double value = Median(others);
    const double predicted = o.ratio ? o.base * value : o.base + value;
    errors.push_back(std::abs(predicted - o.measured) / o.measured);
  }
  fit.set_heldout_median_abs_err(Median(errors));
  return fit;
}

const v1::DeviceCostFit* Find(
    const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>& fits,
    absl::string_view quantity, absl::string_view source,
    absl::string_view gpu) {
  for (const v1::DeviceCostFit& fit : fits) {
    if (fit.quantity() == quantity && fit.source() == source &&
        fit.gpu() == gpu) {
      return &fit;
    }
  }
  return nullptr;
}

// The most specific fit of `quantity`: (source, gpu), (*, gpu), (*, *).
const v1::DeviceCostFit* MostSpecific(
    const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>& fits,
    absl::string_view quantity, absl::string_view source,
    absl::string_view gpu) {
  if (!gpu.empty()) {
    if (const auto* fit = Find(fits, quantity, source, gpu)) return fit;
    if (const auto* fit = Find(fits, quantity, kAny, gpu)) return fit;
  }
  return Find(fits, quantity, kAny, kAny);
}

std::string Basis(const v1::DeviceCostFit& fit, absl::string_view gpu) {
  std::string basis =
      absl::StrCat("fitted on ", fit.runs(), " ",
                   fit.source() == kAny ? "measured" : fit.source(), " run",
                   fit.runs() == 1 ? "" : "s");
  if (fit.gpu() == kAny) {
    absl::StrAppend(&basis, " on every GPU kind (",
                    gpu.empty() ? "a bare size" : absl::StrCat("none on ", gpu),
                    ")");
  } else {
    absl::StrAppend(&basis, " on ", fit.gpu());
  }
  absl::StrAppendFormat(&basis, ", held out by model %.1f %%",
                        100 * fit.heldout_median_abs_err());
  return basis;
}

}  // namespace

double DeviceCosts::AllocatedFrom(double gb, v1::MemoryMetric metric) const {
  switch (metric) {
    case v1::RESERVED:
      return std::max(0.0, gb / reserved_ratio);
    case v1::DEVICE:
    case v1::UNSTATED:
      return std::max(0.0, (gb - context_gb - nccl_gb) / reserved_ratio);
    default:
      return gb;
  }
}

void DeviceCosts::ToProto(v1::DeviceCosts* out) const {
  out->set_reserved_ratio(reserved_ratio);
  out->set_context_gb(context_gb);
  out->set_nccl_gb(nccl_gb);
  out->set_reserved_basis(reserved_basis);
  out->set_context_basis(context_basis);
  out->set_nccl_basis(nccl_basis);
}

std::vector<v1::DeviceCostFit> FitDeviceCosts(
    const std::vector<v1::MeasuredRun>& runs) {
  std::map<GroupKey, std::vector<Observation>> groups;
  for (const v1::MeasuredRun& run : runs) {
    if (Usable(run)) AddObservations(run, &groups);
  }
  std::vector<v1::DeviceCostFit> fits;
  fits.reserve(groups.size());
  for (const auto& [key, observations] : groups) {
    fits.push_back(FitGroup(key, observations));
  }
  return fits;
}

DeviceCosts DeviceCostsFor(
    const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>& fits,
    absl::string_view source, absl::string_view gpu,
    const v1::TrainingSetup& setup) {
  DeviceCosts costs;
  const v1::DeviceCostFit* ratio = nullptr;
  if (setup.expandable_segments()) {
    ratio = MostSpecific(fits, kRatioExpandable, source, gpu);
    if (ratio == nullptr) {
      costs.reserved_basis =
          "expandable_segments: no run measured with it; the ratio without "
          "it is used";
    }
  }
  if (ratio == nullptr) ratio = MostSpecific(fits, kRatio, source, gpu);
  if (ratio != nullptr) {
    costs.reserved_ratio = std::max(1.0, ratio->value());
    const std::string basis = Basis(*ratio, gpu);
    costs.reserved_basis =
        setup.expandable_segments() && ratio->quantity() == kRatio
            ? absl::StrCat(costs.reserved_basis, "; ", basis)
            : basis;
  }
  if (const auto* context = MostSpecific(fits, kContext, source, gpu)) {
    costs.context_gb = std::max(0.0, context->value());
    costs.context_basis = Basis(*context, gpu);
  }
  if (setup.gpus() > 1) {
    const std::string quantity =
        absl::StrCat(kNcclPrefix, StrategyName(LayoutOf(setup).strategy));
    if (const auto* nccl = MostSpecific(fits, quantity, source, gpu)) {
      costs.nccl_gb = std::max(0.0, nccl->value());
      costs.nccl_basis = Basis(*nccl, gpu);
    } else {
      costs.nccl_basis = absl::StrCat(
          "unfitted: no ", StrategyName(LayoutOf(setup).strategy),
          " run carries device memory; the kind's bound covers it");
    }
  }
  return costs;
}

void AnchorDeviceCosts(const std::vector<const v1::MeasuredRun*>& runs,
                       absl::string_view gpu, DeviceCosts* costs) {
  std::vector<double> ratios, outside;
  for (const v1::MeasuredRun* run : runs) {
    if (!Usable(*run)) continue;
    // The ratio is the allocator's on this model's tensors, on any card;
    // the context is the card's (and its driver's).
    if (run->has_peak_reserved_gb() &&
        run->peak_reserved_gb() >= run->measured_peak_gb() &&
        run->measured_peak_gb() >= kDeviceFitMinGb) {
      ratios.push_back(run->peak_reserved_gb() / run->measured_peak_gb());
    }
    if (!gpu.empty() && run->gpu() != gpu) continue;
    if (run->setup().gpus() <= 1) {
      if (const std::optional<double> o = Outside(*run)) outside.push_back(*o);
    }
  }
  if (!ratios.empty()) {
    costs->reserved_ratio = Median(ratios);
    costs->reserved_basis =
        absl::StrCat("anchored on the model's ", ratios.size(), " run",
                     ratios.size() == 1 ? "" : "s");
  }
  if (!outside.empty()) {
    costs->context_gb = Median(outside);
    costs->context_basis =
        absl::StrCat("anchored on the model's ", outside.size(), " run",
                     outside.size() == 1 ? "" : "s");
  }
}

const char* MetricName(v1::MemoryMetric metric) {
  switch (metric) {
    case v1::RESERVED:
      return "reserved";
    case v1::DEVICE:
      return "device";
    case v1::UNSTATED:
      return "unstated";
    default:
      return "allocated";
  }
}

std::optional<v1::MemoryMetric> MetricFromName(absl::string_view name) {
  if (name == "allocated") return v1::ALLOCATED;
  if (name == "reserved") return v1::RESERVED;
  if (name == "device") return v1::DEVICE;
  if (name == "unstated") return v1::UNSTATED;
  return std::nullopt;
}

}  // namespace headroom
