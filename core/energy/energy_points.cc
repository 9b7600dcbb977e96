#include "core/energy/energy_points.h"

#include <map>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/catalog/gpu_catalog.h"

namespace headroom {
namespace {

std::string QuantKeyOf(const std::string& quant) {
  return absl::AsciiStrToUpper(quant);
}

std::string AnchorId(const std::string& arch, const std::string& quant,
                     const v1::EnergyAnchor& a) {
  return absl::StrCat(arch, "|", quant, "|", a.model(), "|", a.gpu(), "|",
                      a.n(), "|", a.de());
}

}  // namespace

std::vector<MeasuredEnergyPoint> PointsFromEnergyRuns(
    const std::vector<EnergyRunRecord>& runs, bool subtract_idle) {
  // (model, gpu, worker) -> fp16 J/1k values and the quantized records.
  using Group = std::tuple<std::string, std::string, std::string>;
  struct Members {
    std::vector<double> fp16;
    std::vector<std::pair<const EnergyRunRecord*, double>> quantized;
  };
  std::map<Group, Members> groups;
  for (const EnergyRunRecord& r : runs) {
    if (r.run.tokens_generated() == 0) continue;
    double joules = r.run.energy_j();
    if (subtract_idle) joules -= r.run.idle_w() * r.run.window_s();
    const double j_per_1k =
        joules / static_cast<double>(r.run.tokens_generated()) * 1000;
    Members& m = groups[{r.run.model(), r.run.gpu(), r.worker}];
    const std::string quant = QuantKeyOf(r.run.quant());
    if (quant == "FP16") {
      m.fp16.push_back(j_per_1k);
    } else if (quant == "NF4" || quant == "INT8") {
      m.quantized.emplace_back(&r, j_per_1k);
    }
  }
  std::vector<MeasuredEnergyPoint> points;
  for (const auto& [group, m] : groups) {
    if (m.fp16.empty()) continue;
    double fp16 = 0;
    for (double v : m.fp16) fp16 += v;
    fp16 /= static_cast<double>(m.fp16.size());
    if (fp16 <= 0) continue;
    for (const auto& [record, j_per_1k] : m.quantized) {
      absl::StatusOr<GpuInfo> gpu = FindGpu(record->run.gpu());
      if (!gpu.ok()) continue;
      MeasuredEnergyPoint p;
      p.arch = gpu->arch;
      p.quant = QuantKeyOf(record->run.quant());
      p.model = record->run.model();
      p.gpu = gpu->name;
      p.params_b = record->run.params_b();
      p.de_pct = 100 * (j_per_1k / fp16 - 1);
      p.worker = record->worker;
      p.date_unix = record->date_unix;
      p.simulated = record->simulated;
      points.push_back(std::move(p));
    }
  }
  return points;
}

std::vector<MeasuredEnergyPoint> PointsFromCurveSets(
    const std::vector<v1::EnergyCurveSet>& sets,
    const v1::EnergyCurveSet& baseline) {
  std::set<std::string> seen;
  const auto each_anchor = [](const v1::EnergyCurveSet& set, auto&& visit) {
    for (const auto& [arch, curves] : set.curves()) {
      if (curves.has_nf4()) {
        for (const auto& a : curves.nf4().anchors()) visit(arch, "NF4", a);
      }
      if (curves.has_int8()) {
        for (const auto& a : curves.int8().anchors()) visit(arch, "INT8", a);
      }
    }
  };
  each_anchor(baseline, [&](const std::string& arch, const char* quant,
                            const v1::EnergyAnchor& a) {
    seen.insert(AnchorId(arch, quant, a));
  });
  std::vector<MeasuredEnergyPoint> points;
  for (const v1::EnergyCurveSet& set : sets) {
    each_anchor(set, [&](const std::string& arch, const char* quant,
                         const v1::EnergyAnchor& a) {
      if (!seen.insert(AnchorId(arch, quant, a)).second) return;
      MeasuredEnergyPoint p;
      p.arch = arch;
      p.quant = quant;
      p.model = a.model();
      p.gpu = a.gpu();
      p.params_b = a.n();
      p.de_pct = a.de();
      p.worker = absl::StrCat("refit ", set.version());
      p.date_unix = set.created_unix();
      points.push_back(std::move(p));
    });
  }
  return points;
}

}  // namespace headroom
