#include "io/published_runs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/evidence/model_key.h"
#include "core/evidence/run_checks.h"
#include "core/frontends/frontend_registry.h"
#include "core/memory/framework_profile.h"
#include "core/memory/model_spec.h"
#include "io/files.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMetrics[] = {"allocated", "reserved", "device",
                                    "unstated"};
constexpr const char* kFrameworks[] = {"litgpt",    "torchtune", "hf-trainer",
                                       "deepspeed", "torch",     "torchtitan",
                                       "unsloth",   "axolotl",   "other"};
// Features a setup uses that TrainingSetup cannot say (data-common.md);
// "other:<word>" names any other.
constexpr const char* kUnmodelled[] = {"chunked-ce",
                                       "activation-offloading",
                                       "selective-checkpointing",
                                       "lora-head",
                                       "lora-embed",
                                       "paged-adamw32",
                                       "adam4bit",
                                       "adamfp8",
                                       "gradient-offload",
                                       "load-16bit-then-quantize",
                                       "generate-eval",
                                       "cpu-offload-other",
                                       "fp8",
                                       "tensor-parallel-other",
                                       "packing"};

template <size_t N>
bool OneOf(const std::string& word, const char* const (&words)[N]) {
  return std::find_if(std::begin(words), std::end(words), [&](const char* w) {
           return word == w;
         }) != std::end(words);
}

template <size_t N>
std::string Allowed(const char* const (&words)[N]) {
  return absl::StrJoin(std::begin(words), std::end(words), ", ");
}

v1::MemoryMetric MetricOf(const std::string& word) {
  if (word == "allocated") return v1::ALLOCATED;
  if (word == "reserved") return v1::RESERVED;
  if (word == "device") return v1::DEVICE;
  return v1::UNSTATED;
}

absl::Status Refused(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// The row's fields that need no file and no catalog.
absl::Status CheckRowFields(const v1::PublishedRun& row,
                            const std::string& where) {
  if (row.publication().empty()) {
    return Refused(where,
                   "publication is empty; allowed: the publication's short id "
                   "(its rows are held out together)");
  }
  if (row.row().empty()) {
    return Refused(where,
                   "row is empty; allowed: a name unique in its publication");
  }
  const v1::PublishedRun::Citation& c = row.citation();
  const bool in_repo =
      !c.repo().empty() && !c.path().empty() && !c.commit().empty();
  if (!in_repo && c.url().empty()) {
    return Refused(where,
                   "citation names no source; allowed: citation.repo + "
                   "citation.path + citation.commit, or citation.url");
  }
  if (c.quote().empty()) {
    return Refused(where,
                   "citation.quote is empty; allowed: the figure's text, "
                   "verbatim from the source");
  }
  if (!OneOf(row.metric(), kMetrics)) {
    return Refused(where,
                   absl::StrCat("metric = '", row.metric().substr(0, 64),
                                "' is unknown; allowed ", Allowed(kMetrics)));
  }
  if (!OneOf(row.framework(), kFrameworks)) {
    return Refused(
        where, absl::StrCat("framework = '", row.framework().substr(0, 64),
                            "' is unknown; allowed ", Allowed(kFrameworks)));
  }
  for (const std::string& feature : row.unmodelled()) {
    const bool other =
        absl::StartsWith(feature, "other:") && feature.size() > 6;
    if (!other && !OneOf(feature, kUnmodelled)) {
      return Refused(
          where, absl::StrCat("unmodelled '", feature.substr(0, 64),
                              "' is unknown; allowed ", Allowed(kUnmodelled),
                              ", other:<word>"));
    }
  }
  if (!row.has_setup()) {
    return Refused(where,
                   "setup is missing; allowed: a TrainingSetup (protobuf "
                   "JSON, e.g. {\"precision\": \"BF16_TRUE\"})");
  }
  // A row whose setup is not clear may not know its batch: listed only.
  if (row.batch() == 0 && row.setup_clear()) {
    return Refused(where,
                   "batch = 0; allowed: the per-GPU micro-batch, >= 1 (or "
                   "setup_clear false where the source does not say it)");
  }
  if (row.has_measured_gb() == row.oom()) {
    return Refused(where, row.oom() ? "measured_gb is set on an oom row; "
                                      "allowed: one of measured_gb and oom"
                                    : "neither measured_gb nor oom; allowed: "
                                      "one of measured_gb and oom");
  }
  if (row.has_measured_gb() &&
      !(std::isfinite(row.measured_gb()) && row.measured_gb() > 0)) {
    return Refused(where, absl::StrCat("measured_gb = ", row.measured_gb(),
                                       "; allowed: GB (10^9 bytes), > 0"));
  }
  if (!row.config().empty() && !row.template_().empty()) {
    return Refused(where,
                   "config and template are both set; allowed: one of them");
  }
  if (!(std::isfinite(row.gpu_memory_gb()) && row.gpu_memory_gb() >= 0)) {
    return Refused(where, absl::StrCat("gpu_memory_gb = ", row.gpu_memory_gb(),
                                       "; allowed: the card's GB, > 0"));
  }
  return absl::OkStatus();
}

// The text of the config file `name` in `configs_dir`, which must be a
// plain name of a file there (no folder, no link out of it).
absl::StatusOr<std::string> ReadConfig(const fs::path& configs_dir,
                                       const std::string& name,
                                       const std::string& where) {
  const std::string allowed =
      absl::StrCat("; allowed: the name of a file in ", configs_dir.string());
  if (name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name == "." || name == "..") {
    return Refused(
        where, absl::StrCat("config '", name.substr(0, 200), "' is outside ",
                            kPublishedConfigsDir, "/", allowed));
  }
  const fs::path file = configs_dir / name;
  std::error_code error;
  if (!fs::is_regular_file(file, error)) {
    return Refused(where, absl::StrCat("config '", name, "': ", file.string(),
                                       " does not exist", allowed));
  }
  const fs::path real = fs::canonical(file, error);
  const fs::path dir = fs::canonical(configs_dir, error);
  if (error || real.parent_path() != dir) {
    return Refused(where, absl::StrCat("config '", name, "' leads outside ",
                                       kPublishedConfigsDir, "/", allowed));
  }
  const uintmax_t size = fs::file_size(real, error);
  if (error || size > kMaxPublishedConfigBytes) {
    return Refused(where, absl::StrCat("config '", name, "' is larger than ",
                                       kMaxPublishedConfigBytes, " bytes"));
  }
  absl::StatusOr<std::string> text = ReadFile(real.string());
  if (!text.ok()) return Refused(where, text.status().message());
  return text;
}

// The model the row names: its config converted by the Hugging Face
// front-end at the row's positions, or its catalog template.
absl::StatusOr<ResolvedModel> RowModel(const v1::PublishedRun& row,
                                       const fs::path& configs_dir,
                                       const ModelCatalog& catalog,
                                       const std::string& where,
                                       v1::ModelRef* ref) {
  if (!row.template_().empty()) {
    if (!catalog.Find(row.template_()).ok()) {
      return Refused(where,
                     absl::StrCat("template '", row.template_().substr(0, 64),
                                  "' is not in the catalog; allowed: a "
                                  "name `headroom models` lists"));
    }
    ref->set_template_(row.template_());
  } else {
    ASSIGN_OR_RETURN(std::string text,
                     ReadConfig(configs_dir, row.config(), where));
    const std::string file = (configs_dir / row.config()).string();
    absl::StatusOr<const ModelFrontend*> frontend = FrontendForFile(file, text);
    if (!frontend.ok() || (*frontend)->source() != v1::ModelRef::kHfConfig) {
      return Refused(where, absl::StrCat("config '", row.config(),
                                         "' is not a Hugging Face "
                                         "config.json; allowed: one"));
    }
    absl::Status set = (*frontend)->SetFromFile(file, std::move(text), ref);
    if (!set.ok()) return Refused(where, set.message());
  }
  absl::StatusOr<ResolvedModel> model =
      ResolveModelRef(*ref, row.setup(), catalog);
  if (!model.ok()) {
    return Refused(
        where,
        absl::StrCat(row.template_().empty() ? "config '" : "template '",
                     row.template_().empty() ? row.config() : row.template_(),
                     "': ", model.status().message()));
  }
  return model;
}

// Why the planner lists the row but does not use it; empty when it uses it.
std::string WhyUnused(const v1::PublishedRun& row, bool catalog_gpu) {
  if (!row.setup_clear()) return "published: setup not clear (see its notes)";
  if (row.config().empty() && row.template_().empty()) {
    return "published: no config and no template";
  }
  // A feature the setup cannot say yet (chunked loss, packing ...) does not
  // keep the row out: it is what users run, and the bound must cover it;
  // the run's source names the features.
  // The answers it is compared with are the catalog's cards' (a run's
  // card must be one: CheckMeasuredRun).
  if (!catalog_gpu) {
    return absl::StrCat("published: gpu '", row.gpu().substr(0, 64),
                        "' is not in the catalog");
  }
  return "";
}

// The framework profile the row's framework runs under, where the row's
// setup names none: axolotl runs transformers' Trainer (hf-trainer);
// torchtitan, unsloth and other have no profile (generic). The version
// where it is dot-separated numbers.
void SetProfile(const v1::PublishedRun& row, v1::TrainingSetup* setup) {
  if (setup->framework() != v1::TrainingSetup::FRAMEWORK_UNSPECIFIED) return;
  const std::string name =
      row.framework() == "axolotl" ? "hf-trainer" : row.framework();
  v1::TrainingSetup::Framework framework;
  if (!ParseFramework(name, &framework)) return;
  setup->set_framework(framework);
  v1::TrainingSetup versioned;
  versioned.set_framework_version(row.framework_version());
  if (ValidateFramework(versioned).ok()) {
    setup->set_framework_version(row.framework_version());
  }
}

// The row as a measured run, or the error naming where it is wrong.
absl::StatusOr<v1::MeasuredRun> RunOfRow(const v1::PublishedRun& row,
                                         const fs::path& configs_dir,
                                         const ModelCatalog& catalog,
                                         const std::string& where) {
  RETURN_IF_ERROR(CheckRowFields(row, where));
  absl::StatusOr<GpuInfo> gpu = FindGpu(row.gpu());
  v1::MeasuredRun run;
  run.set_measured_by(v1::PUBLISHED);
  run.set_metric(MetricOf(row.metric()));
  run.set_publication(row.publication());
  run.set_source(absl::StrCat("published ", row.publication(), "/", row.row()));
  if (!row.unmodelled().empty()) {
    absl::StrAppend(run.mutable_source(),
                    " (unmodelled: ", absl::StrJoin(row.unmodelled(), ", "),
                    ")");
  }
  run.set_framework(absl::StrCat(row.framework(),
                                 row.framework_version().empty() ? "" : " ",
                                 row.framework_version()));
  run.set_gpu(gpu.ok() ? gpu->name : row.gpu());
  // The row's batch is the per-GPU micro-batch; a run's is the step's (as
  // CheckFitRequest.batches: grad_accum microbatches of it).
  run.set_batch(row.batch() * std::max<uint32_t>(1, row.setup().grad_accum()));
  if (row.oom()) {
    // 0 (no card size known): the row is listed, not used (WhyUnused).
    run.set_oom_on_gb(gpu.ok() ? gpu->memory_gb : row.gpu_memory_gb());
  } else {
    run.set_measured_peak_gb(row.measured_gb());
  }
  *run.mutable_setup() = row.setup();
  SetProfile(row, run.mutable_setup());
  if (!row.config().empty() || !row.template_().empty()) {
    v1::ModelRef ref;
    ASSIGN_OR_RETURN(ResolvedModel model,
                     RowModel(row, configs_dir, catalog, where, &ref));
    *run.mutable_spec() = model.spec();
    *run.mutable_setup() = ProfileSetup(ref, row.setup());
    run.set_family(model.spec().family());
    run.set_params(CountParams(model.spec()));
    run.set_model_key(ModelKeyOf(model.spec(), run.setup()).id);
  }
  run.set_excluded(WhyUnused(row, gpu.ok()));
  if (run.excluded().empty()) {
    absl::Status checked = CheckMeasuredRun(run, catalog, "run");
    if (!checked.ok()) return Refused(where, checked.message());
  }
  if (!run.excluded().empty() && run.has_oom_on_gb() && run.oom_on_gb() <= 0) {
    run.clear_oom_on_gb();
  }
  return run;
}

}  // namespace

absl::StatusOr<PublishedRuns> LoadPublishedRuns(const std::string& path,
                                                const ModelCatalog& catalog) {
  std::error_code error;
  const uintmax_t size = fs::file_size(path, error);
  if (!error && size > kMaxPublishedLines * (kMaxPublishedLineBytes + 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", size, " bytes; allowed at most ", kMaxPublishedLines,
        " lines of ", kMaxPublishedLineBytes, " bytes"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const fs::path configs_dir =
      fs::path(path).parent_path() / kPublishedConfigsDir;
  PublishedRuns out;
  std::set<std::pair<std::string, std::string>> seen;
  size_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string at = absl::StrCat(path, ":", line_number);
    if (line_number > kMaxPublishedLines) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": more than ", kMaxPublishedLines,
                       " lines; allowed at most ", kMaxPublishedLines));
    }
    if (line.size() > kMaxPublishedLineBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": ", line.size(), " bytes; allowed at most ",
                       kMaxPublishedLineBytes, " a line"));
    }
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    v1::PublishedRun row;
    RETURN_IF_ERROR(ParseJson(line, at, /*ignore_unknown=*/false, &row));
    const std::string where =
        absl::StrCat(at, " (row ", row.row().substr(0, 200), ")");
    ASSIGN_OR_RETURN(v1::MeasuredRun run,
                     RunOfRow(row, configs_dir, catalog, where));
    if (!seen.emplace(row.publication(), row.row()).second) {
      return Refused(where, absl::StrCat("publication '", row.publication(),
                                         "' has this row twice; allowed: "
                                         "each row name once"));
    }
    (run.excluded().empty() ? out.usable : out.unused)
        .push_back(std::move(run));
  }
  return out;
}

bool IsPublishedRunsFile(absl::string_view path, absl::string_view first_line) {
  return fs::path(std::string(path)).filename() == kPublishedRunsFile ||
         absl::StrContains(first_line, "\"publication\"");
}

absl::StatusOr<std::vector<v1::MeasuredRun>> LoadRunsFiles(
    const std::string& paths, const ModelCatalog& catalog) {
  std::vector<v1::MeasuredRun> runs;
  for (absl::string_view path_view :
       absl::StrSplit(paths, ',', absl::SkipEmpty())) {
    const std::string path(path_view);
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    const absl::string_view first_line =
        absl::string_view(text).substr(0, text.find('\n'));
    if (!IsPublishedRunsFile(path, first_line)) {
      ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> file, LoadRunsJsonl(path));
      for (v1::MeasuredRun& run : file) runs.push_back(std::move(run));
      continue;
    }
    ASSIGN_OR_RETURN(PublishedRuns published, LoadPublishedRuns(path, catalog));
    for (v1::MeasuredRun& run : published.usable)
      runs.push_back(std::move(run));
    // Listed runs are stored too (excluded, never fitted nor anchored on),
    // where the run checks accept them: a card the catalog does not know
    // cannot be stored.
    for (v1::MeasuredRun& run : published.unused) {
      if (CheckMeasuredRun(run, catalog, "run").ok()) {
        runs.push_back(std::move(run));
      }
    }
  }
  return runs;
}

}  // namespace headroom
