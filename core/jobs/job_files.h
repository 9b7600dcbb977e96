#ifndef HEADROOM_CORE_JOBS_JOB_FILES_H_
#define HEADROOM_CORE_JOBS_JOB_FILES_H_

// The job's own config files as the question: a litgpt, torchtune, axolotl,
// TRL or TrainingArguments file, with the DeepSpeed and accelerate files
// beside it, read into the model, setup, micro-batch, accumulation,
// sequence length and GPU count they describe. Every value says where it
// came from: the file's key, or the framework's default with its source
// (JobDerivation). Plain C++: bytes in, messages out.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// The file's kind: `file.kind` when set, else detected from its keys
// (litgpt: checkpoint_dir; torchtune: model._component_; axolotl:
// base_model; TRL / TrainingArguments: model_name_or_path or
// per_device_train_batch_size, YAML and JSON respectively; DeepSpeed:
// zero_optimization or train_micro_batch_size_per_gpu; accelerate:
// distributed_type). INVALID_ARGUMENT naming the file when none matches.
absl::StatusOr<v1::JobFile::Kind> DetectJobKind(const v1::JobFile& file);

// What the files say: kind, the model as they name it (model_id; `model`
// left empty), the setup, micro-batch, the step's batch (micro-batch x
// grad_accum, per GPU) and from_file / defaults / ignored. INVALID_ARGUMENT
// naming the file and key for a file over 1 MiB, too deeply nested or
// with too many nodes, an unknown kind, a memory-relevant key headroom does
// not read, a value outside the allowed ones, and contradictions between
// keys or files (a DeepSpeed file beside an accelerate FSDP config, a
// DeepSpeed value that differs from the job's, litgpt's global batch not a
// multiple of micro-batch x devices).
absl::StatusOr<v1::JobDerivation> DeriveJob(const v1::JobFiles& files);

// A request with a job, made into the plain request it stands for.
struct JobRequest {
  // The request without `job`: the derived model (a catalog name),
  // setup and batch, with the request's own model, setup fields named in
  // job.overrides and batches over them; targets and the rest as given.
  v1::CheckFitRequest request;
  // DeriveJob's, with `model` resolved and `overridden` filled.
  v1::JobDerivation derivation;
  // What the answer says of the job (which fields the request overrode).
  std::vector<std::string> assumptions;
};

// DeriveJob, then the model id resolved in `catalog` (ModelCatalog::
// ResolveId; one unknown there is INVALID_ARGUMENT naming it and asking
// for `--model FILE`, a config.json) and the request merged over it.
// INVALID_ARGUMENT for an override path that is not a TrainingSetup field
// (naming job.overrides[i]).
absl::StatusOr<JobRequest> RequestFromJob(const v1::CheckFitRequest& request,
                                          const ModelCatalog& catalog);

// Writes the derivation into `response.job` and the job's assumptions
// after the answer's own.
void AnswerJob(JobRequest job, v1::CheckFitResponse* response);

// A request with a job answered: RequestFromJob, `answer` (CheckFit) on the
// plain request, then AnswerJob. Errors are either's.
using PlainAnswer = std::function<absl::StatusOr<v1::CheckFitResponse>(
    const v1::CheckFitRequest&)>;
absl::StatusOr<v1::CheckFitResponse> AnswerJobRequest(
    const v1::CheckFitRequest& request, const ModelCatalog& catalog,
    const PlainAnswer& answer);

}  // namespace headroom

#endif  // HEADROOM_CORE_JOBS_JOB_FILES_H_
