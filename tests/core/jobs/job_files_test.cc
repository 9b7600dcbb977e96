#include "core/jobs/job_files.h"

#include <memory>
#include <string>

#include "core/planner/fit_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using S = v1::TrainingSetup;

// A job file from tests/data/jobs (tests/data/jobs/SOURCES.md: each byte
// for byte as its repository publishes it).
v1::JobFile DataFile(const std::string& name) {
  absl::StatusOr<std::string> text =
      ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/jobs/" + name);
  EXPECT_TRUE(text.ok()) << text.status();
  v1::JobFile file;
  file.set_name(name);
  file.set_content(text.ok() ? *text : "");
  return file;
}

v1::JobFile Inline(const std::string& name, const std::string& text) {
  v1::JobFile file;
  file.set_name(name);
  file.set_content(text);
  return file;
}

v1::JobFiles Job(v1::JobFile job) {
  v1::JobFiles files;
  *files.mutable_job() = std::move(job);
  return files;
}

template <typename Lines>
bool Contains(const Lines& lines, const std::string& part) {
  for (const std::string& line : lines) {
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

std::shared_ptr<ModelCatalog> Catalog() {
  absl::StatusOr<ModelCatalog> loaded =
      LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return std::make_shared<ModelCatalog>(std::move(*loaded));
}

v1::FactorSet Factors() {
  v1::FactorSet set;
  set.set_version("fs-test");
  set.set_headroom(1.15);
  set.set_k95(1.2);
  set.mutable_factors()->set_optimizer(1.0);
  set.mutable_factors()->set_outputs(1.0);
  return set;
}

// litgpt config_hub/finetune/llama-2-7b/lora.yaml, key by key against
// litgpt finetune/lora.py's setup() where the file is silent.
TEST(JobFilesTest, LitgptLoraYaml) {
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(DataFile("litgpt-llama-2-7b-lora.yaml")));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), v1::JobFile::LITGPT);
  EXPECT_EQ(job->model_id(), "meta-llama/Llama-2-7b-hf");
  const S& setup = job->setup();
  EXPECT_EQ(setup.framework(), S::LITGPT);
  EXPECT_EQ(setup.precision(), S::BF16_TRUE);  // precision: bf16-true
  EXPECT_EQ(setup.quant_base(), S::BASE_QUANT_UNSPECIFIED);  // quantize: null
  EXPECT_EQ(setup.gpus(), 1u);                               // devices: 1
  EXPECT_EQ(setup.lora().rank(), 32u);                       // lora_r: 32
  EXPECT_DOUBLE_EQ(setup.lora().dropout(), 0.05);
  // lora_query and lora_value true; key, projection, mlp, head false.
  EXPECT_THAT(setup.lora().targets(), ElementsAre("q", "v"));
  // global_batch_size 8 / (1 device x 1 node) / micro_batch_size 2 = 4.
  EXPECT_EQ(job->micro_batch(), 2u);
  EXPECT_EQ(setup.grad_accum(), 4u);
  EXPECT_EQ(job->batch(), 8u);
  EXPECT_EQ(setup.positions(), 512u);      // train.max_seq_length
  EXPECT_EQ(setup.optimizer(), S::ADAMW);  // class_path torch.optim.AdamW
  // lm_head_chunk_size=128: 512 positions in 4 chunks.
  EXPECT_EQ(setup.loss(), S::CHUNKED_CE);
  EXPECT_EQ(setup.loss_chunks(), 4u);
  EXPECT_EQ(setup.checkpointing(), S::NO_CHECKPOINTING);
  EXPECT_TRUE(Contains(job->from_file(),
                       "litgpt-llama-2-7b-lora.yaml: train.global_batch_size "
                       "= 8 -> grad_accum"));
  EXPECT_TRUE(
      Contains(job->defaults(), "26857050fe3ff627cd714fe92f5838f51a3d5efa"));
  EXPECT_TRUE(Contains(job->ignored(), "litgpt-llama-2-7b-lora.yaml: data"));
  EXPECT_TRUE(Contains(job->ignored(), "litgpt-llama-2-7b-lora.yaml: seed"));
}

// torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml.
TEST(JobFilesTest, TorchtuneRecipe) {
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(DataFile("torchtune-llama3_1-8B_lora_single_device.yaml")));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), v1::JobFile::TORCHTUNE);
  EXPECT_EQ(job->model_id(), "llama3_1_8b");
  const S& setup = job->setup();
  EXPECT_EQ(setup.framework(), S::TORCHTUNE);
  EXPECT_EQ(setup.precision(), S::BF16_TRUE);  // dtype: bf16
  EXPECT_EQ(setup.lora().rank(), 8u);
  EXPECT_DOUBLE_EQ(setup.lora().dropout(), 0.0);
  // lora_attn_modules q_proj, v_proj, output_proj; apply_lora_to_mlp.
  EXPECT_THAT(setup.lora().targets(),
              ElementsAre("q", "v", "o", "gate", "up", "down"));
  EXPECT_EQ(setup.optimizer(), S::ADAMW_FUSED);  // AdamW, fused: True
  EXPECT_EQ(setup.loss(), S::CHUNKED_CE);        // LinearCrossEntropyLoss
  EXPECT_EQ(setup.loss_chunks(), 8u);            // num_output_chunks = 8
  EXPECT_EQ(job->micro_batch(), 2u);             // batch_size: 2
  EXPECT_EQ(setup.grad_accum(), 8u);
  EXPECT_EQ(job->batch(), 16u);
  EXPECT_EQ(setup.positions(), 0u);  // tokenizer.max_seq_len: null
  EXPECT_EQ(setup.checkpointing(), S::FULL);
  EXPECT_TRUE(setup.activation_checkpointing());
  EXPECT_FALSE(setup.activation_offloading());
  EXPECT_FALSE(setup.compile());
  EXPECT_TRUE(Contains(job->ignored(), ": profiler"));
  EXPECT_TRUE(Contains(job->ignored(), ": checkpointer.checkpoint_files"));
}

// axolotl examples/llama-2/qlora.yml: bf16 "auto" and the schema defaults.
TEST(JobFilesTest, AxolotlQlora) {
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(DataFile("axolotl-llama-2-qlora.yml")));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), v1::JobFile::AXOLOTL);
  EXPECT_EQ(job->model_id(), "NousResearch/Llama-2-7b-hf");
  const S& setup = job->setup();
  EXPECT_EQ(setup.framework(), S::HF_TRAINER);
  EXPECT_EQ(setup.quant_base(), S::NF4);       // load_in_4bit: true
  EXPECT_EQ(setup.precision(), S::BF16_TRUE);  // bf16 auto: bf16 weights
  EXPECT_EQ(setup.lora().rank(), 32u);
  EXPECT_THAT(setup.lora().targets(), ElementsAre("all-linear"));
  EXPECT_EQ(setup.optimizer(), S::PAGED_ADAMW);  // paged_adamw_32bit
  EXPECT_EQ(job->micro_batch(), 2u);
  EXPECT_EQ(setup.grad_accum(), 4u);
  EXPECT_EQ(job->batch(), 8u);
  EXPECT_EQ(setup.positions(), 4096u);  // sequence_len
  EXPECT_EQ(setup.attention(), S::FLASH);
  EXPECT_EQ(setup.checkpointing(), S::FULL);
  EXPECT_EQ(setup.gpus(), 0u);
  EXPECT_TRUE(Contains(job->defaults(), "gpus = 1"));
  EXPECT_TRUE(Contains(job->ignored(), "axolotl-llama-2-qlora.yml: datasets"));
}

// alignment-handbook's zephyr-7b-beta SFT QLoRA recipe (TrlParser).
TEST(JobFilesTest, TrlRecipe) {
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(DataFile("trl-zephyr-7b-beta-sft-config_qlora.yaml")));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), v1::JobFile::TRL);
  EXPECT_EQ(job->model_id(), "mistralai/Mistral-7B-v0.1");
  const S& setup = job->setup();
  EXPECT_EQ(setup.precision(), S::BF16_TRUE);  // torch_dtype bfloat16
  EXPECT_EQ(setup.quant_base(), S::NF4);
  EXPECT_EQ(setup.lora().rank(), 16u);
  EXPECT_THAT(setup.lora().targets(),
              ElementsAre("q", "k", "v", "o", "gate", "up", "down"));
  EXPECT_EQ(job->micro_batch(), 4u);
  EXPECT_EQ(setup.grad_accum(), 2u);
  EXPECT_EQ(setup.eval_batch(), 8u);
  EXPECT_EQ(setup.positions(), 2048u);  // max_seq_length (older SFTConfig)
  EXPECT_EQ(setup.optimizer(), S::ADAMW_FUSED);  // optim default
  EXPECT_TRUE(Contains(job->defaults(), "optimizer = adamw_torch_fused"));
  EXPECT_TRUE(
      Contains(job->defaults(), "00349ae87eddc872ffa21a8a54f264375a0056a8"));
}

// A TrainingArguments JSON with the accelerate test suite's ZeRO-3 file:
// its "auto" values come from the job (micro-batch 1, accumulation 1).
TEST(JobFilesTest, TrainingArgumentsWithDeepSpeed) {
  v1::JobFiles files = Job(DataFile("training_args.json"));
  *files.mutable_deepspeed() = DataFile("ds_config_zero3.json");
  absl::StatusOr<v1::JobDerivation> job = DeriveJob(files);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kind(), v1::JobFile::TRAINING_ARGUMENTS);
  EXPECT_EQ(job->model_id(), "facebook/bart-base");
  const S& setup = job->setup();
  EXPECT_EQ(setup.framework(), S::DEEPSPEED);
  EXPECT_EQ(setup.parallel(), S::ZERO3);
  EXPECT_EQ(setup.offload(), S::BOTH);     // optimizer and params on cpu
  EXPECT_EQ(setup.precision(), S::FP32);   // bf16/fp16 auto, job's False
  EXPECT_EQ(setup.optimizer(), S::ADAMW);  // torch_adam: true
  EXPECT_EQ(job->micro_batch(), 1u);
  EXPECT_EQ(setup.grad_accum(), 1u);
  EXPECT_TRUE(Contains(job->from_file(),
                       "ds_config_zero3.json: train_micro_batch_size_per_gpu "
                       "= auto"));
}

// The recipe with alignment-handbook's ZeRO-3 accelerate config: eight
// processes, stage 3.
TEST(JobFilesTest, TrlWithAccelerateZero3) {
  v1::JobFiles files =
      Job(DataFile("trl-zephyr-7b-beta-sft-config_qlora.yaml"));
  *files.mutable_accelerate() = DataFile("accelerate-zero3.yaml");
  absl::StatusOr<v1::JobDerivation> job = DeriveJob(files);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->setup().gpus(), 8u);
  EXPECT_EQ(job->setup().parallel(), S::ZERO3);
  EXPECT_EQ(job->setup().framework(), S::DEEPSPEED);
  EXPECT_EQ(job->setup().offload(), S::OFFLOAD_UNSPECIFIED);  // none
}

TEST(JobFilesTest, TrlWithAccelerateFsdp) {
  v1::JobFiles files =
      Job(DataFile("trl-zephyr-7b-beta-sft-config_qlora.yaml"));
  *files.mutable_accelerate() = DataFile("accelerate-fsdp.yaml");
  absl::StatusOr<v1::JobDerivation> job = DeriveJob(files);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->setup().gpus(), 2u);  // num_processes: 2
  EXPECT_EQ(job->setup().parallel(), S::FSDP_FULL);
  EXPECT_EQ(job->setup().offload(), S::OFFLOAD_UNSPECIFIED);
  EXPECT_EQ(job->setup().precision(), S::BF16_TRUE);  // the job's decides
}

// Contradictions name the file and the keys.
TEST(JobFilesTest, RefusesContradictions) {
  // The DeepSpeed file's gradient_accumulation_steps 1 against the
  // recipe's 2.
  v1::JobFiles files =
      Job(DataFile("trl-zephyr-7b-beta-sft-config_qlora.yaml"));
  *files.mutable_deepspeed() = DataFile("ds_config_zero3.json");
  absl::StatusOr<v1::JobDerivation> job = DeriveJob(files);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("ds_config_zero3.json: gradient_accumulation_steps = "
                        "1 contradicts the job's gradient_accumulation_steps "
                        "= 2"));
  // DeepSpeed beside an accelerate FSDP config.
  files = Job(DataFile("training_args.json"));
  *files.mutable_accelerate() = DataFile("accelerate-fsdp.yaml");
  *files.mutable_deepspeed() = DataFile("ds_config_zero3.json");
  job = DeriveJob(files);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("ds_config_zero3.json: zero_optimization.stage is "
                        "given while the accelerate config's "
                        "distributed_type is FSDP"));
  // litgpt: 10 is not a multiple of micro-batch 4 x 1 device.
  job = DeriveJob(Job(Inline("lora.yaml",
                             "checkpoint_dir: checkpoints/meta-llama/x\n"
                             "train:\n  global_batch_size: 10\n"
                             "  micro_batch_size: 4\n")));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("lora.yaml: train.global_batch_size = 10 is not a "
                        "multiple of train.micro_batch_size x devices x "
                        "num_nodes = 4 x 1 = 4"));
}

TEST(JobFilesTest, RefusesUnknownKindsAndMemoryKeys) {
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(Inline("run.yaml", "epochs: 3\nlr: 0.1\n")));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("run.yaml: cannot tell which framework's config"));
  EXPECT_THAT(job.status().message(), HasSubstr("--job_kind"));
  job = DeriveJob(Job(
      Inline("tt.yaml",
             "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n"
             "  use_fancy_cache: true\n"
             "optimizer:\n  _component_: torch.optim.AdamW\nbatch_size: 1\n")));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("tt.yaml: model.use_fancy_cache is a key that "
                        "changes the memory figure"));
  job = DeriveJob(Job(
      Inline("tt.yaml",
             "model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\n"
             "optimizer:\n  _component_: torch.optim.Muon\nbatch_size: 1\n")));
  EXPECT_THAT(job.status().message(),
              HasSubstr("tt.yaml: optimizer._component_ = torch.optim.Muon "
                        "is not modelled"));
}

TEST(JobFilesTest, RefusesOversizeDeepAndAliasBombs) {
  std::string big = "checkpoint_dir: x\n";
  big.append(1 << 20, '#');
  absl::StatusOr<v1::JobDerivation> job =
      DeriveJob(Job(Inline("big.yaml", big)));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("big.yaml is 1048594 bytes; allowed up to 1048576"));
  const std::string deep =
      "a: " + std::string(40, '[') + std::string(40, ']') + "\n";
  job = DeriveJob(Job(Inline("deep.yaml", deep)));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("deep.yaml nests deeper than 32 levels"));
  // Nine levels of ten aliases: 10^9 nodes expanded.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) bomb += (j ? ", " : "") + prev;
    bomb += "]\n";
  }
  job = DeriveJob(Job(Inline("bomb.yaml", bomb)));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(),
              HasSubstr("bomb.yaml has more than 100000 nodes"));
  job = DeriveJob(
      Job(Inline("deep.json", std::string(40, '[') + std::string(40, ']'))));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
}

// A request with the torchtune recipe answers as the same request given
// as flags: template llama-3.1-8b, the setup field by field, the step's
// batch 2 x 8 = 16.
TEST(JobFilesTest, JobAnswersAsTheEquivalentFlags) {
  const FitPlanner planner(Catalog(), Factors(), 0.95);
  v1::CheckFitRequest by_job;
  *by_job.mutable_job() =
      Job(DataFile("torchtune-llama3_1-8B_lora_single_device.yaml"));
  by_job.add_targets()->set_gpu("H100");

  v1::CheckFitRequest by_flags;
  by_flags.mutable_model()->set_template_("llama-3.1-8b");
  by_flags.add_batches(16);
  by_flags.add_targets()->set_gpu("H100");
  S* setup = by_flags.mutable_setup();
  setup->set_framework(S::TORCHTUNE);
  setup->set_precision(S::BF16_TRUE);
  setup->set_optimizer(S::ADAMW_FUSED);
  setup->mutable_lora()->set_rank(8);
  for (const char* t : {"q", "v", "o", "gate", "up", "down"}) {
    setup->mutable_lora()->add_targets(t);
  }
  setup->set_grad_accum(8);
  setup->set_activation_checkpointing(true);
  setup->set_checkpointing(S::FULL);
  setup->set_loss(S::CHUNKED_CE);
  setup->set_loss_chunks(8);

  absl::StatusOr<v1::CheckFitResponse> job = planner.CheckFit(by_job);
  absl::StatusOr<v1::CheckFitResponse> flags = planner.CheckFit(by_flags);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(job->model(), "llama-3.1-8b");
  EXPECT_EQ(job->job().model(), "llama-3.1-8b");
  ASSERT_EQ(job->estimates_size(), 1);
  ASSERT_EQ(flags->estimates_size(), 1);
  EXPECT_EQ(job->estimates(0).batch(), 16u);
  EXPECT_DOUBLE_EQ(job->estimates(0).peak_gb(), flags->estimates(0).peak_gb());
  ASSERT_EQ(job->targets_size(), 1);
  EXPECT_EQ(job->targets(0).max_batch_fits(),
            flags->targets(0).max_batch_fits());
  EXPECT_TRUE(Contains(job->assumptions(), "micro-batch 2 x grad_accum 8"));
}

// Setup fields named in job.overrides, the request's model and batches
// override the file's.
TEST(JobFilesTest, RequestOverridesTheFile) {
  const std::shared_ptr<ModelCatalog> catalog = Catalog();
  v1::CheckFitRequest request;
  *request.mutable_job() =
      Job(DataFile("torchtune-llama3_1-8B_lora_single_device.yaml"));
  request.mutable_job()->add_overrides("lora.rank");
  request.mutable_setup()->mutable_lora()->set_rank(64);
  request.mutable_setup()->set_grad_accum(2);  // not named: the file's 8
  request.add_batches(4);
  absl::StatusOr<JobRequest> plain = RequestFromJob(request, *catalog);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->request.setup().lora().rank(), 64u);
  EXPECT_EQ(plain->request.setup().grad_accum(), 8u);
  EXPECT_THAT(plain->request.setup().lora().targets(),
              ElementsAre("q", "v", "o", "gate", "up", "down"));
  EXPECT_THAT(plain->request.batches(), ElementsAre(4u));
  EXPECT_FALSE(plain->request.has_job());
  EXPECT_THAT(plain->derivation.overridden(),
              ElementsAre("setup.lora.rank", "batches"));
  EXPECT_TRUE(Contains(plain->assumptions,
                       "the request overrides the file's setup.lora.rank, "
                       "batches"));

  request.mutable_job()->set_overrides(0, "lora.nonsense");
  plain = RequestFromJob(request, *catalog);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plain.status().message(),
              HasSubstr("job.overrides[0] = lora.nonsense is not a "
                        "TrainingSetup field"));
}

// The shipped litgpt recipe's checkpoint_dir names a model the catalog
// has (models/hf/llama-2-7b.json, by its Hub id).
TEST(JobFilesTest, LitgptCheckpointDirResolvesThroughTheCatalog) {
  const std::shared_ptr<ModelCatalog> catalog = Catalog();
  v1::CheckFitRequest request;
  *request.mutable_job() = Job(DataFile("litgpt-llama-2-7b-lora.yaml"));
  request.add_targets()->set_gpu("H100");
  absl::StatusOr<JobRequest> plain = RequestFromJob(request, *catalog);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->request.model().template_(), "llama-2-7b");
  EXPECT_EQ(plain->derivation.model(), "llama-2-7b");
  EXPECT_EQ(plain->request.setup().framework(), v1::TrainingSetup::LITGPT);
}

// A litgpt checkpoint the catalog has no config for (the shipped recipe's
// Llama-2-7b renamed to a model that does not exist): the error names the
// id and asks for --model FILE; with --model the file's setup still holds.
TEST(JobFilesTest, UnknownModelIdAsksForAConfig) {
  const std::shared_ptr<ModelCatalog> catalog = Catalog();
  v1::CheckFitRequest request;
  *request.mutable_job() = Job(DataFile("litgpt-llama-2-7b-lora.yaml"));
  std::string* content =
      request.mutable_job()->mutable_job()->mutable_content();
  const size_t at = content->find("Llama-2-7b-hf");
  ASSERT_NE(at, std::string::npos);
  content->replace(at, 13, "Llama-9-7b-hf");
  request.add_targets()->set_gpu("H100");
  absl::StatusOr<JobRequest> plain = RequestFromJob(request, *catalog);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plain.status().message(),
              HasSubstr("litgpt-llama-2-7b-lora.yaml: the model "
                        "meta-llama/Llama-9-7b-hf / Llama-9-7b-hf has no "
                        "config in the catalog; give its config.json with "
                        "--model FILE"));
  request.mutable_model()->set_template_("llama-3.1-8b");
  plain = RequestFromJob(request, *catalog);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->request.model().template_(), "llama-3.1-8b");
  EXPECT_EQ(plain->request.setup().lora().rank(), 32u);
  EXPECT_THAT(plain->request.batches(), ElementsAre(8u));
  EXPECT_THAT(plain->derivation.overridden(), ElementsAre("model"));
}

}  // namespace
}  // namespace headroom
