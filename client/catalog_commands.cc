#include "client/catalog_commands.h"

#include <iomanip>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/setup_flags.h"
#include "core/catalog/gpu_catalog.h"
#include "core/catalog/model_catalog.h"
#include "core/memory/model_spec.h"
#include "io/catalog_files.h"
#include "nlohmann/json.hpp"

namespace headroom::cli {
std::string CardUnderstood(const std::string& gpu_flag_value) {
  absl::StatusOr<GpuInfo> gpu = FindGpu(gpu_flag_value);
  if (gpu.ok()) return absl::StrCat(gpu->name, " (", gpu->memory_gb, " GB)");
  return absl::StrCat(gpu_flag_value, " GB");
}

namespace {

// 1235814400 -> "1,235,814,400".
std::string Grouped(uint64_t n) {
  std::string digits = absl::StrCat(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) {
    digits.insert(static_cast<size_t>(i), ",");
  }
  return digits;
}

}  // namespace

int ListModels(const Options& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(options.models_dir);
  if (!catalog.ok()) {
    return Fail(err, absl::StrCat("--models_dir ", options.models_dir, ": ",
                                  catalog.status().message()));
  }
  nlohmann::json json = nlohmann::json::array();
  if (!options.json) {
    out << std::left << std::setw(24) << "model" << std::right << std::setw(18)
        << "params" << std::setw(10) << "positions"
        << "  family (a cut-down template: its full model's); cut-down or "
           "full model\n";
  }
  for (const std::string& name : catalog->Names()) {
    const v1::ModelSpec* spec = *catalog->Find(name);
    const uint64_t params = CountParams(*spec);
    const std::string cut = CutDownRemark(*spec);
    // A cut-down template names the full model shipped for it; a full model
    // the published file it came from.
    const std::string full_model = catalog->FullModelOf(name);
    const FullModelSource* source = catalog->FullModelSourceOf(name);
    if (options.json) {
      json.push_back({{"name", name},
                      {"family", spec->family()},
                      {"params", params},
                      {"positions", spec->positions()},
                      {"cutDown", cut},
                      {"fullModel", full_model},
                      {"file", source != nullptr ? "models/" + source->file
                                                 : "models/" + name + ".json"},
                      {"hub", source != nullptr ? source->hub : ""}});
      continue;
    }
    std::string remark;
    if (!cut.empty()) {
      remark = "; cut-down: " + cut +
               (full_model.empty() ? "" : " (full model: " + full_model + ")");
    } else if (source != nullptr) {
      remark = absl::StrCat("; full model: models/", source->file, " (",
                            source->hub, ")");
    }
    // One family for a model and its cut-down template (gpt2 and gpt2-124m
    // are both transformers); the template's own label is the measured
    // runs' (data/memory-runs.jsonl).
    std::string family = spec->family();
    if (absl::StatusOr<const v1::ModelSpec*> full = catalog->Find(full_model);
        !full_model.empty() && full.ok()) {
      family = (*full)->family();
    }
    out << std::left << std::setw(24) << name << std::right << std::setw(18)
        << Grouped(params) << std::setw(10) << Grouped(spec->positions())
        << "  " << family << remark << "\n";
  }
  if (options.json) out << json.dump(2) << "\n";
  return kExitAnswer;
}

int ListGpus(const Options& options, std::ostream& out, std::ostream& /*err*/) {
  nlohmann::json json = nlohmann::json::array();
  if (!options.json) {
    out << std::left << std::setw(24) << "gpu" << std::right << std::setw(6)
        << "GB"
        << "  " << std::left << std::setw(10) << "arch" << std::right
        << std::setw(8) << "GB/s" << std::setw(13) << "fp16 TFLOPS"
        << "\n";
  }
  for (const GpuInfo& gpu : GpuCatalog()) {
    if (options.json) {
      json.push_back({{"name", gpu.name},
                      {"memoryGb", gpu.memory_gb},
                      {"arch", gpu.arch},
                      {"memoryBandwidthGbS", gpu.memory_bandwidth_gb_s},
                      {"fp16DenseTflops", gpu.fp16_dense_tflops}});
      continue;
    }
    out << std::left << std::setw(24) << gpu.name << std::right << std::setw(6)
        << gpu.memory_gb << "  " << std::left << std::setw(10) << gpu.arch
        << std::right << std::setw(8) << gpu.memory_bandwidth_gb_s
        << std::setw(13) << gpu.fp16_dense_tflops << "\n";
  }
  if (options.json) out << json.dump(2) << "\n";
  return kExitAnswer;
}

void RegisterCatalogCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* models =
      ctx.Command(&app, "models", "the model catalog's templates");
  AddJson(models, ctx.options);
  ctx.Run(models, [&ctx] { return ListModels(ctx.options, ctx.out, ctx.err); });
  CLI::App* words = ctx.Command(
      &app, "setup-words",
      "every setup flag with its words, range, default, and its extender "
      "annotation and Python keyword (--json: the Python client's table)");
  AddJson(words, ctx.options);
  ctx.Run(words, [&ctx] { return ListSetupWords(ctx.options, ctx.out); });
  CLI::App* gpus = ctx.Command(&app, "gpus", "the GPU catalog");
  AddJson(gpus, ctx.options);
  ctx.Run(gpus, [&ctx] { return ListGpus(ctx.options, ctx.out, ctx.err); });
}

}  // namespace headroom::cli
