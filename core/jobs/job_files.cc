#include "core/jobs/job_files.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"
#include "core/jobs/job_reader.h"
#include "core/jobs/job_tree.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace headroom {
namespace {

using jobs::DerivedJob;
using jobs::JobReader;
using jobs::Tree;
using Kind = v1::JobFile::Kind;

constexpr size_t kMaxJobFileName = 256;

absl::Status CheckFile(const v1::JobFile& file, absl::string_view flag) {
  if (file.name().size() > kMaxJobFileName) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file name is ", file.name().size(),
                     " bytes; allowed up to ", kMaxJobFileName));
  }
  if (file.content().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " file ", file.name(), " is empty; give the config file"));
  }
  return absl::OkStatus();
}

bool Has(const Tree& tree, const char* key) { return tree.contains(key); }

Kind DetectFromTree(const Tree& tree, bool json) {
  if (Has(tree, "checkpoint_dir")) return v1::JobFile::LITGPT;
  if (Has(tree, "model") && tree["model"].is_object() &&
      tree["model"].contains("_component_")) {
    return v1::JobFile::TORCHTUNE;
  }
  if (Has(tree, "base_model")) return v1::JobFile::AXOLOTL;
  if (Has(tree, "zero_optimization") ||
      Has(tree, "train_micro_batch_size_per_gpu")) {
    return v1::JobFile::DEEPSPEED;
  }
  if (Has(tree, "distributed_type")) return v1::JobFile::ACCELERATE;
  if (Has(tree, "model_name_or_path") ||
      Has(tree, "per_device_train_batch_size")) {
    return json ? v1::JobFile::TRAINING_ARGUMENTS : v1::JobFile::TRL;
  }
  return v1::JobFile::KIND_UNSPECIFIED;
}

bool IsJson(const v1::JobFile& file) {
  const size_t first = file.content().find_first_not_of(" \t\r\n");
  return first != std::string::npos && file.content()[first] == '{';
}

absl::StatusOr<Kind> KindOf(const v1::JobFile& file, const Tree& tree) {
  if (file.kind() != v1::JobFile::KIND_UNSPECIFIED) return file.kind();
  const Kind kind = DetectFromTree(tree, IsJson(file));
  if (kind == v1::JobFile::KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.name(),
        ": cannot tell which framework's config this is (no checkpoint_dir, "
        "model._component_, base_model, model_name_or_path, "
        "per_device_train_batch_size, zero_optimization or distributed_type "
        "key); give its kind (--job_kind litgpt, torchtune, axolotl, trl, "
        "training-args)"));
  }
  return kind;
}

absl::Status ReadJobFile(Kind kind, JobReader& reader, DerivedJob* job) {
  switch (kind) {
    case v1::JobFile::LITGPT:
      return jobs::ReadLitgpt(reader, job);
    case v1::JobFile::TORCHTUNE:
      return jobs::ReadTorchtune(reader, job);
    case v1::JobFile::AXOLOTL:
      return jobs::ReadAxolotl(reader, job);
    case v1::JobFile::TRL:
      return jobs::ReadTrl(reader, job);
    case v1::JobFile::TRAINING_ARGUMENTS:
      return jobs::ReadTrainingArguments(reader, job);
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      reader.file(), " is a ", v1::JobFile::Kind_Name(kind),
      " config, not a job's own file; give it with ",
      kind == v1::JobFile::DEEPSPEED ? "--deepspeed" : "--accelerate_config",
      " and the job's config with --job"));
}

bool IsHfKind(Kind kind) {
  return kind == v1::JobFile::AXOLOTL || kind == v1::JobFile::TRL ||
         kind == v1::JobFile::TRAINING_ARGUMENTS;
}

// A DeepSpeed or accelerate file: its kind checked, its tree applied.
absl::Status ApplySideFile(const v1::JobFile& file, Kind expected,
                           absl::string_view flag, DerivedJob* job,
                           v1::JobDerivation* derivation) {
  RETURN_IF_ERROR(CheckFile(file, flag));
  ASSIGN_OR_RETURN(const Tree tree, jobs::ParseJobTree(file));
  const Kind kind = file.kind() != v1::JobFile::KIND_UNSPECIFIED
                        ? file.kind()
                        : DetectFromTree(tree, IsJson(file));
  if (kind != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " file ", file.name(), " is not a ",
                     v1::JobFile::Kind_Name(expected), " config (no ",
                     expected == v1::JobFile::DEEPSPEED
                         ? "zero_optimization or train_micro_batch_size_per_gpu"
                         : "distributed_type",
                     " key)"));
  }
  JobReader reader(file.name(), tree, derivation);
  return expected == v1::JobFile::DEEPSPEED
             ? jobs::ApplyDeepSpeed(reader, job)
             : jobs::ApplyAccelerate(reader, job);
}

absl::Status ApplySideFiles(const v1::JobFiles& files, Kind kind,
                            DerivedJob* job, v1::JobDerivation* derivation) {
  const bool deepspeed = !files.deepspeed().content().empty();
  const bool accelerate = !files.accelerate().content().empty();
  if (!IsHfKind(kind) && (deepspeed || accelerate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        deepspeed ? files.deepspeed().name() : files.accelerate().name(),
        ": a DeepSpeed or accelerate config goes with a transformers "
        "Trainer job (axolotl, trl, training-args); ",
        files.job().name(), " is ", v1::JobFile::Kind_Name(kind),
        ", whose file sets its own parallel setup"));
  }
  if (accelerate) {
    RETURN_IF_ERROR(ApplySideFile(files.accelerate(), v1::JobFile::ACCELERATE,
                                  "--accelerate_config", job, derivation));
  } else if (IsHfKind(kind)) {
    derivation->add_defaults(
        "gpus = 1: no accelerate config, one process (python script.py)");
  }
  if (!job->deepspeed_named.empty() && !deepspeed) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.job().name(), ": deepspeed = ", job->deepspeed_named,
        " names a DeepSpeed config; give that file with --deepspeed"));
  }
  if (deepspeed) {
    RETURN_IF_ERROR(ApplySideFile(files.deepspeed(), v1::JobFile::DEEPSPEED,
                                  "--deepspeed", job, derivation));
  }
  return absl::OkStatus();
}

// DeriveJob's work, keeping every id the files name for the model.
absl::StatusOr<v1::JobDerivation> Derive(const v1::JobFiles& files,
                                         std::vector<std::string>* ids) {
  RETURN_IF_ERROR(CheckFile(files.job(), "--job"));
  ASSIGN_OR_RETURN(const Tree tree, jobs::ParseJobTree(files.job()));
  ASSIGN_OR_RETURN(const Kind kind, KindOf(files.job(), tree));
  v1::JobDerivation derivation;
  DerivedJob job;
  {
    JobReader reader(files.job().name(), tree, &derivation);
    RETURN_IF_ERROR(ReadJobFile(kind, reader, &job));
  }
  RETURN_IF_ERROR(ApplySideFiles(files, kind, &job, &derivation));
  derivation.set_kind(kind);
  if (!job.model_ids.empty()) derivation.set_model_id(job.model_ids.front());
  const uint32_t accum = std::max<uint32_t>(1, job.setup.grad_accum());
  derivation.set_micro_batch(job.micro_batch);
  derivation.set_batch(job.micro_batch * accum);
  *derivation.mutable_setup() = std::move(job.setup);
  *ids = std::move(job.model_ids);
  return derivation;
}

// The first of `ids` the catalog knows.
absl::StatusOr<std::string> ResolveModel(const std::vector<std::string>& ids,
                                         const std::string& file,
                                         const ModelCatalog& catalog) {
  if (ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file,
        " names no model; give one with --model (a catalog name or a "
        "config.json FILE)"));
  }
  std::string closest;
  for (const std::string& id : ids) {
    absl::StatusOr<std::string> name = catalog.ResolveId(id);
    if (name.ok()) return name;
    if (!absl::IsNotFound(name.status())) return name.status();
    if (closest.empty()) closest = std::string(name.status().message());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      file, ": the model ", absl::StrJoin(ids, " / "),
      " has no config in the catalog; give its config.json with --model "
      "FILE (",
      closest, ")"));
}

// Sets `path` (a TrainingSetup field path such as "lora.rank") of `to`
// to its value in `from`.
absl::Status CopyField(const google::protobuf::Message& from,
                       google::protobuf::Message* to, const std::string& path,
                       int index) {
  const google::protobuf::Message* src = &from;
  google::protobuf::Message* dst = to;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const google::protobuf::FieldDescriptor* field =
        src->GetDescriptor()->FindFieldByName(parts[i]);
    const bool last = i + 1 == parts.size();
    if (field == nullptr ||
        (!last && (field->is_repeated() ||
                   field->cpp_type() !=
                       google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job.overrides[", index, "] = ", path,
          " is not a TrainingSetup field; allowed field paths such as "
          "precision, gpus, lora.rank"));
    }
    if (last) {
      std::unique_ptr<google::protobuf::Message> copy(src->New());
      copy->CopyFrom(*src);
      dst->GetReflection()->SwapFields(copy.get(), dst, {field});
      return absl::OkStatus();
    }
    src = &src->GetReflection()->GetMessage(*src, field);
    dst = dst->GetReflection()->MutableMessage(dst, field);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobFile::Kind> DetectJobKind(const v1::JobFile& file) {
  ASSIGN_OR_RETURN(const Tree tree, jobs::ParseJobTree(file));
  return KindOf(file, tree);
}

absl::StatusOr<v1::JobDerivation> DeriveJob(const v1::JobFiles& files) {
  std::vector<std::string> ids;
  return Derive(files, &ids);
}

absl::StatusOr<JobRequest> RequestFromJob(const v1::CheckFitRequest& request,
                                          const ModelCatalog& catalog) {
  std::vector<std::string> ids;
  ASSIGN_OR_RETURN(v1::JobDerivation derivation, Derive(request.job(), &ids));
  JobRequest out;
  out.request = request;
  out.request.clear_job();
  if (request.model().source_case() != v1::ModelRef::SOURCE_NOT_SET) {
    derivation.add_overridden("model");
  } else {
    ASSIGN_OR_RETURN(const std::string name,
                     ResolveModel(ids, request.job().job().name(), catalog));
    derivation.set_model(name);
    out.request.mutable_model()->set_template_(name);
  }
  v1::TrainingSetup setup = derivation.setup();
  for (int i = 0; i < request.job().overrides_size(); ++i) {
    const std::string& path = request.job().overrides(i);
    RETURN_IF_ERROR(CopyField(request.setup(), &setup, path, i));
    derivation.add_overridden(absl::StrCat("setup.", path));
  }
  *out.request.mutable_setup() = std::move(setup);
  if (request.batches_size() > 0) {
    derivation.add_overridden("batches");
  } else {
    out.request.add_batches(derivation.batch());
  }
  out.assumptions.push_back(
      absl::StrCat("job: ", request.job().job().name(), " read as ",
                   v1::JobFile::Kind_Name(derivation.kind()), "; micro-batch ",
                   derivation.micro_batch(), " x grad_accum ",
                   std::max<uint32_t>(1, derivation.setup().grad_accum()),
                   " = the step's batch ", derivation.batch(), " per GPU"));
  if (derivation.overridden_size() > 0) {
    out.assumptions.push_back(
        absl::StrCat("job: the request overrides the file's ",
                     absl::StrJoin(derivation.overridden(), ", ")));
  }
  out.derivation = std::move(derivation);
  return out;
}

void AnswerJob(JobRequest job, v1::CheckFitResponse* response) {
  *response->mutable_job() = std::move(job.derivation);
  for (std::string& line : job.assumptions) {
    response->add_assumptions(std::move(line));
  }
}

absl::StatusOr<v1::CheckFitResponse> AnswerJobRequest(
    const v1::CheckFitRequest& request, const ModelCatalog& catalog,
    const PlainAnswer& answer) {
  ASSIGN_OR_RETURN(JobRequest job, RequestFromJob(request, catalog));
  ASSIGN_OR_RETURN(v1::CheckFitResponse response, answer(job.request));
  AnswerJob(std::move(job), &response);
  return response;
}

}  // namespace headroom
