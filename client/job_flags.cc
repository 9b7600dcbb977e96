#include "client/job_flags.h"

#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

constexpr size_t kMaxJobFileBytes = 1 << 20;

absl::StatusOr<v1::JobFile> ReadJobFile(const std::string& path,
                                        absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": ", text.status().message()));
  }
  if (text->size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, " is ", text->size(),
                     " bytes; allowed up to ", kMaxJobFileBytes, " (1 MiB)"));
  }
  v1::JobFile file;
  file.set_name(path);
  file.set_content(std::move(*text));
  return file;
}

absl::StatusOr<v1::JobFile::Kind> KindOf(const std::string& kind) {
  static const auto* const kKinds =
      new std::map<std::string, v1::JobFile::Kind>{
          {"litgpt", v1::JobFile::LITGPT},
          {"torchtune", v1::JobFile::TORCHTUNE},
          {"axolotl", v1::JobFile::AXOLOTL},
          {"trl", v1::JobFile::TRL},
          {"training-args", v1::JobFile::TRAINING_ARGUMENTS}};
  if (kind.empty()) return v1::JobFile::KIND_UNSPECIFIED;
  auto it = kKinds->find(kind);
  if (it == kKinds->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--job_kind ", kind,
                     " is not known; allowed litgpt, torchtune, axolotl, trl, "
                     "training-args"));
  }
  return it->second;
}

void PrintLines(const char* title,
                const google::protobuf::RepeatedPtrField<std::string>& lines,
                std::ostream& out) {
  for (const std::string& line : lines) out << "  " << title << line << "\n";
}

}  // namespace

void AddJobFlags(CLI::App* app, Options& o) {
  app->add_option("--job", o.job,
                  "the job's own config (litgpt, torchtune, axolotl or TRL "
                  "YAML, TrainingArguments JSON): model, setup and batch "
                  "come from it; setup flags given beside it override it");
  app->add_option("--deepspeed", o.deepspeed,
                  "the DeepSpeed config JSON the job runs with");
  app->add_option("--accelerate_config", o.accelerate_config,
                  "the accelerate config YAML the job is launched with");
  app->add_option("--job_kind", o.job_kind,
                  "the --job file's kind when its keys do not tell: litgpt, "
                  "torchtune, axolotl, trl, training-args");
}

absl::Status FillJob(const Options& options, v1::CheckFitRequest* request) {
  if (options.job.empty()) {
    if (!options.deepspeed.empty() || !options.accelerate_config.empty() ||
        !options.job_kind.empty()) {
      return absl::InvalidArgumentError(
          "--deepspeed, --accelerate_config and --job_kind go with --job "
          "FILE (the job's own config)");
    }
    return absl::OkStatus();
  }
  v1::JobFiles* job = request->mutable_job();
  ASSIGN_OR_RETURN(*job->mutable_job(), ReadJobFile(options.job, "--job"));
  ASSIGN_OR_RETURN(const v1::JobFile::Kind kind, KindOf(options.job_kind));
  job->mutable_job()->set_kind(kind);
  if (!options.deepspeed.empty()) {
    ASSIGN_OR_RETURN(*job->mutable_deepspeed(),
                     ReadJobFile(options.deepspeed, "--deepspeed"));
  }
  if (!options.accelerate_config.empty()) {
    ASSIGN_OR_RETURN(
        *job->mutable_accelerate(),
        ReadJobFile(options.accelerate_config, "--accelerate_config"));
  }
  for (const std::string& path : options.job_overrides) {
    job->add_overrides(path);
  }
  return absl::OkStatus();
}

void PrintJob(const v1::JobDerivation& job, std::ostream& out) {
  out << "job: " << v1::JobFile::Kind_Name(job.kind()) << ", model "
      << (job.model_id().empty() ? "(not named)" : job.model_id());
  if (!job.model().empty()) out << " -> " << job.model();
  out << ", micro-batch " << job.micro_batch() << ", step batch " << job.batch()
      << " per GPU\n";
  PrintLines("from file: ", job.from_file(), out);
  PrintLines("default: ", job.defaults(), out);
  PrintLines("overridden: ", job.overridden(), out);
  PrintLines("ignored: ", job.ignored(), out);
}

}  // namespace headroom::cli
