// The scheduler extender's protocol and decisions on request bodies in the
// shape kube-scheduler sends (tests/data/extender/README.md says where the
// shape comes from), answered by the planner over the shipped runs.

#include "core/scheduling/extender.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "core/calibration/calibrate.h"
#include "core/evidence/evidence.h"
#include "core/planner/fit_planner.h"
#include "core/setup/setup_words.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "nlohmann/json.hpp"
#include "tests/support/extender_bodies.h"

namespace headroom {
namespace {

using ::headroom::testing::ExtenderBody;

const std::string kRoot = HEADROOM_SOURCE_DIR;
using Json = nlohmann::json;

class ExtenderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto catalog = LoadModelCatalog(kRoot + "/models");
    ASSERT_TRUE(catalog.ok());
    auto shared = std::make_shared<const ModelCatalog>(std::move(*catalog));
    auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
    ASSERT_TRUE(runs.ok());
    auto fitted = Calibrate(*runs, *shared, FitOptions{}, "test");
    ASSERT_TRUE(fitted.ok());
    planner_ = new FitPlanner(shared, fitted->factor_set, 0.95);
    evidence_ = new std::shared_ptr<const Evidence>(
        Evidence::Build(*runs, *shared, planner_->priors()));
  }
  static void TearDownTestSuite() {
    delete evidence_;
    delete planner_;
  }

  static CheckFitFn CheckFit() {
    return [](const v1::CheckFitRequest& request) {
      return planner_->CheckFit(request, evidence_->get());
    };
  }

  static FitPlanner* planner_;
  static std::shared_ptr<const Evidence>* evidence_;
};

FitPlanner* ExtenderTest::planner_ = nullptr;
std::shared_ptr<const Evidence>* ExtenderTest::evidence_ = nullptr;

TEST_F(ExtenderTest, FilterKeepsTheNodesWhereTheJobFits) {
  absl::StatusOr<ExtenderArgs> args =
      ParseExtenderArgs(ExtenderBody("filter-nodes.json"));
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->pod, "ml/bert-finetune-0");
  EXPECT_EQ(args->gpus, 1);
  ASSERT_EQ(args->nodes.size(), 4u);
  EXPECT_FALSE(args->names_only);
  // Other annotations are not Headroom's.
  EXPECT_EQ(args->annotations.size(), 2u);

  auto job = JobFromAnnotations(args->annotations, args->gpus);
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ((*job)->request.model().template_(), "bert-base");
  EXPECT_EQ((*job)->request.batches(0), 512u);
  // One GPU: no count in the setup, none in the reasons.
  EXPECT_EQ((*job)->request.setup().gpus(), 0u);

  // Cards from GPU Feature Discovery's labels: L4, H100 and the A100-40GB by
  // product (their memory labels agree; NVIDIA-A100-SXM4-40GB names its
  // memory), none for the CPU node.
  std::vector<std::optional<v1::Target>> targets;
  for (const ExtenderNode& node : args->nodes) {
    targets.push_back(TargetFromLabels(node));
  }
  ASSERT_TRUE(targets[0].has_value() && targets[1].has_value() &&
              targets[2].has_value());
  EXPECT_EQ(targets[0]->gpu(), "L4");
  EXPECT_EQ(targets[1]->gpu(), "H100");
  EXPECT_EQ(targets[2]->gpu(), "A100-40GB");
  EXPECT_FALSE(targets[3].has_value());

  auto decisions =
      DecideNodes(**job, *args, targets, CheckFit(), ExtenderOptions{});
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  // bert-base at 512 went OOM on a 24 GB L4 in the shipped runs.
  EXPECT_EQ((*decisions)[0].verdict, v1::DOES_NOT_FIT);
  EXPECT_EQ((*decisions)[1].verdict, v1::FITS);
  EXPECT_EQ((*decisions)[2].verdict, v1::BORDERLINE);
  EXPECT_FALSE((*decisions)[3].known);

  const Json result = Json::parse(FilterResultJson(*args, *decisions));
  ASSERT_EQ(result["Nodes"]["items"].size(), 1u);
  // The passing node comes back as it was sent.
  EXPECT_EQ(
      result["Nodes"]["items"][0],
      Json::parse(ExtenderBody("filter-nodes.json"))["Nodes"]["items"][1]);
  EXPECT_TRUE(result["NodeNames"].is_null());
  const Json& unresolvable = result["FailedAndUnresolvableNodes"];
  ASSERT_TRUE(unresolvable.contains("gpu-l4-a"));
  EXPECT_NE(unresolvable["gpu-l4-a"].get<std::string>().find(
                "bert-base at batch 512 is DOES_NOT_FIT on L4 (24.0 GB)"),
            std::string::npos)
      << unresolvable["gpu-l4-a"];
  EXPECT_NE(unresolvable["gpu-a100-40"].get<std::string>().find("BORDERLINE"),
            std::string::npos);
  ASSERT_TRUE(result["FailedNodes"].contains("cpu-only"));
  EXPECT_EQ(result["Error"], "");

  // BORDERLINE allowed by a flag; unknown GPUs passed by another.
  ExtenderOptions lenient;
  lenient.allow_borderline = true;
  lenient.fail_unknown_gpu = false;
  auto lenient_decisions =
      DecideNodes(**job, *args, targets, CheckFit(), lenient);
  ASSERT_TRUE(lenient_decisions.ok());
  const Json lenient_result =
      Json::parse(FilterResultJson(*args, *lenient_decisions));
  EXPECT_EQ(lenient_result["Nodes"]["items"].size(), 3u);
}

TEST_F(ExtenderTest, PrioritizeScoresByTheMemoryLeftFree) {
  absl::StatusOr<ExtenderArgs> args =
      ParseExtenderArgs(ExtenderBody("filter-nodecache.json"));
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_TRUE(args->names_only);
  auto job = JobFromAnnotations(args->annotations, args->gpus);
  ASSERT_TRUE(job.ok() && job->has_value());
  // Node names only: the cards come from the workers on those nodes.
  v1::Target l4, h100;
  l4.set_gpu("L4");
  h100.set_gpu("H100");
  const std::vector<std::optional<v1::Target>> targets = {l4, h100,
                                                          std::nullopt};
  auto decisions =
      DecideNodes(**job, *args, targets, CheckFit(), ExtenderOptions{});
  ASSERT_TRUE(decisions.ok()) << decisions.status();
  ASSERT_TRUE((*decisions)[0].passes && (*decisions)[1].passes);

  const Json filtered = Json::parse(FilterResultJson(*args, *decisions));
  EXPECT_TRUE(filtered["Nodes"].is_null());
  EXPECT_EQ(filtered["NodeNames"], Json::array({"node-l4", "node-h100"}));
  EXPECT_TRUE(filtered["FailedNodes"].contains("node-without-worker"));

  // Tightest fit first: the L4 leaves less free than the H100.
  const Json tight =
      Json::parse(PriorityListJson(*args, *decisions, ExtenderOptions{}));
  ASSERT_EQ(tight.size(), 3u);
  EXPECT_EQ(tight[0]["Host"], "node-l4");
  EXPECT_EQ(tight[0]["Score"], 10);
  EXPECT_EQ(tight[1]["Score"], 0);
  EXPECT_EQ(tight[2]["Score"], 0);  // unknown GPU
  ExtenderOptions room;
  room.prefer_most_room = true;
  const Json roomy = Json::parse(PriorityListJson(*args, *decisions, room));
  EXPECT_EQ(roomy[0]["Score"], 0);
  EXPECT_EQ(roomy[1]["Score"], 10);
}

TEST(ExtenderInputTest, MalformedBodiesNameTheField) {
  const auto error = [](const std::string& body) {
    absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
    EXPECT_FALSE(args.ok()) << body;
    EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(args.status().message());
  };
  EXPECT_NE(error("not json").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error("{\"Nodes\":{\"items\":[]}}").find("Pod is required"),
            std::string::npos);
  EXPECT_NE(error("{\"Pod\":{}}").find("Nodes or NodeNames is required"),
            std::string::npos);
  EXPECT_NE(error("{\"Pod\":{},\"Nodes\":{\"items\":{}}}")
                .find("Nodes.items must be a list"),
            std::string::npos);
  EXPECT_NE(error("{\"Pod\":{},\"Nodes\":{\"items\":[{\"metadata\":{"
                  "\"name\":\"a\"}},{\"metadata\":{}}]}}")
                .find("Nodes.items[1].metadata.name is required"),
            std::string::npos);
  EXPECT_NE(error("{\"Pod\":{},\"NodeNames\":[\"a\",3]}")
                .find("NodeNames[1] must be a string"),
            std::string::npos);
  EXPECT_NE(error("{\"Pod\":{\"spec\":{\"containers\":[{\"resources\":{"
                  "\"limits\":{\"nvidia.com/gpu\":\"lots\"}}}]}},"
                  "\"NodeNames\":[]}")
                .find("Pod.spec.containers[0].resources.limits"),
            std::string::npos);
  // Go's decoder matches fields without regard to case; so does this one.
  EXPECT_TRUE(ParseExtenderArgs("{\"pod\":{},\"nodenames\":[\"a\"]}").ok());
}

TEST(ExtenderInputTest, AnnotationsSayWhatIsWrong) {
  const auto message = [](std::map<std::string, std::string> annotations) {
    auto job = JobFromAnnotations(annotations);
    EXPECT_FALSE(job.ok());
    return std::string(job.status().message());
  };
  // A pod that does not ask Headroom passes untouched.
  auto none = JobFromAnnotations({{"batch", "8"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_NE(message({{"model", "gpt2"}}).find("headroom.dev/batch = \"\""),
            std::string::npos);
  EXPECT_NE(message({{"model", "gpt2"}, {"batch", "abc"}})
                .find("allowed the per-GPU batch"),
            std::string::npos);
  // The setup's words are the vocabulary's, said as the CLI says them.
  EXPECT_EQ(message({{"model", "gpt2"}, {"batch", "8"}, {"precision", "int4"}}),
            "annotation headroom.dev/precision 'int4' is unknown; allowed "
            "fp32, bf16, fp16, bf16-true, fp16-true");
  EXPECT_EQ(message({{"model", "gpt2"}, {"batch", "8"}, {"lora-rank", "-4"}}),
            "annotation headroom.dev/lora-rank '-4' is invalid; allowed "
            "0..4096");
  EXPECT_NE(message({{"model", "gpt2"}, {"batch", "8"}, {"gpus", "auto"}})
                .find("a pod's GPUs are its nvidia.com/gpu request"),
            std::string::npos);
  EXPECT_NE(message({{"model", "gpt2"}, {"batch", "8"}, {"colour", "red"}})
                .find("headroom.dev/colour is unknown"),
            std::string::npos);
  auto full = JobFromAnnotations({{"model", "gpt2"},
                                  {"batch", "8"},
                                  {"precision", "bf16"},
                                  {"optimizer", "sgd"},
                                  {"positions", "512"},
                                  {"checkpointing", "true"},
                                  {"fused-attention", "yes"},
                                  {"coverage", "0.9"}});
  ASSERT_TRUE(full.ok() && full->has_value()) << full.status();
  const v1::TrainingSetup& setup = (*full)->request.setup();
  EXPECT_EQ(setup.precision(), v1::TrainingSetup::BF16_MIXED);
  EXPECT_EQ(setup.optimizer(), v1::TrainingSetup::SGD);
  EXPECT_EQ(setup.positions(), 512u);
  EXPECT_TRUE(setup.activation_checkpointing());
  EXPECT_EQ(setup.attention(), v1::TrainingSetup::SDPA);
  EXPECT_EQ((*full)->request.coverage(), 0.9);
}

// Every word of the setup vocabulary is an annotation, and sets what the
// CLI's flag sets: a word one of them lacks fails here.
TEST(ExtenderInputTest, EverySetupWordIsAnAnnotation) {
  int checked = 0;
  for (const SetupKey& key : SetupVocabulary()) {
    std::vector<std::string> values;
    for (const SetupWord& w : key.words) {
      if (w.request.empty()) values.push_back(w.word);
    }
    if (key.type == SetupKeyType::kUint) {
      values.push_back(absl::StrCat(static_cast<uint64_t>(key.max)));
    } else if (key.type == SetupKeyType::kNumber) {
      values.push_back("0.5");
    } else if (key.type == SetupKeyType::kBool) {
      values.push_back("true");
    } else if (key.type == SetupKeyType::kString ||
               (key.type == SetupKeyType::kStrings && key.words.empty())) {
      values.push_back("abc");
    }
    for (const std::string& value : values) {
      const std::string name = key.Annotation().substr(strlen("headroom.dev/"));
      auto job = JobFromAnnotations(
          {{"model", "gpt2"}, {"batch", "8"}, {name, value}});
      ASSERT_TRUE(job.ok() && job->has_value())
          << name << "=" << value << ": " << job.status();
      v1::TrainingSetup expected;
      SetupExtras extras;
      ASSERT_TRUE(
          ApplySetupValue(key, value, key.Flag(), &expected, &extras).ok());
      EXPECT_EQ((*job)->request.setup().SerializeAsString(),
                expected.SerializeAsString())
          << name << "=" << value;
      ++checked;
    }
  }
  // 30 keys; the word keys alone have over 40 words.
  EXPECT_GT(checked, 70);
}

// A pod that asks for eight GPUs is an eight-GPU job: its strategy from
// headroom.dev/parallel, the verdict per GPU. Asked as one GPU the same
// model does not fit; the reasons say which it was asked as.
TEST_F(ExtenderTest, AMultiGpuPodIsJudgedAsAMultiGpuJob) {
  const std::map<std::string, std::string> annotations = {
      {"model", "llama-3.1-8b"},
      {"batch", "4"},
      {"precision", "bf16"},
      {"parallel", "fsdp-full"},
      {"checkpointing", "full"}};
  ExtenderArgs args;
  args.pod = "ml/trainer-0";
  args.gpus = 8;
  ExtenderNode h100;
  h100.name = "gpu-h100-a";
  args.nodes = {h100};
  v1::Target card;
  card.set_gpu("H100");
  auto eight = JobFromAnnotations(annotations, 8);
  ASSERT_TRUE(eight.ok() && eight->has_value()) << eight.status();
  EXPECT_EQ((*eight)->request.setup().gpus(), 8u);
  EXPECT_EQ((*eight)->request.setup().parallel(), v1::TrainingSetup::FSDP_FULL);
  auto decided = DecideNodes(**eight, args, {card}, CheckFit(), {});
  ASSERT_TRUE(decided.ok()) << decided.status();

  // The same question as `headroom fit --gpus 8 --parallel fsdp-full` asks
  // it: the extender's peak is the planner's per-GPU peak.
  v1::CheckFitRequest direct = (*eight)->request;
  *direct.add_targets() = card;
  auto answer = planner_->CheckFit(direct, evidence_->get());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ((*decided)[0].verdict, answer->targets(0).verdicts(0));
  EXPECT_EQ((*decided)[0].peak_gb,
            answer->targets(0).batches(0).figures().device_gb());
  EXPECT_NE((*decided)[0].reason.find("on 8 GPUs (the pod's), fsdp-full"),
            std::string::npos)
      << (*decided)[0].reason;
  EXPECT_NE((*decided)[0].reason.find("per GPU"), std::string::npos);

  // One GPU of the same card holds the whole model, gradients and states.
  args.gpus = 1;
  auto one = JobFromAnnotations(annotations, 1);
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->request.setup().gpus(), 0u);
  auto alone = DecideNodes(**one, args, {card}, CheckFit(), {});
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_GT(alone->at(0).peak_gb, 2 * decided->at(0).peak_gb);
}

// A gang job's pod holds part of the job: headroom.dev/world-size is the
// whole job's count, the pod's GPUs are a node's share.
TEST(ExtenderInputTest, AGangPodAsksForTheWholeJob) {
  auto gang = JobFromAnnotations({{"model", "gpt2"},
                                  {"batch", "8"},
                                  {"world-size", "32"},
                                  {"parallel", "fsdp-hybrid"}},
                                 8);
  ASSERT_TRUE(gang.ok() && gang->has_value()) << gang.status();
  EXPECT_EQ((*gang)->request.setup().gpus(), 32u);
  EXPECT_EQ((*gang)->request.setup().gpus_per_node(), 8u);
  EXPECT_EQ((*gang)->gpus_text, "32 GPUs in all, 8 per pod");
  auto uneven = JobFromAnnotations(
      {{"model", "gpt2"}, {"batch", "8"}, {"world-size", "12"}}, 8);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find(
                "a multiple of the pod's nvidia.com/gpu (8)"),
            std::string::npos)
      << uneven.status();
  auto disagree = JobFromAnnotations(
      {{"model", "gpt2"}, {"batch", "8"}, {"world-size", "16"}, {"gpus", "8"}},
      8);
  ASSERT_FALSE(disagree.ok());
  EXPECT_NE(disagree.status().message().find("headroom.dev/gpus (8)"),
            std::string::npos);
}

// headroom.dev/job names a ConfigMap key; the job file then says the model
// and the batch, so neither annotation is needed.
TEST(ExtenderInputTest, AJobAnnotationNamesAConfigMapKey) {
  auto job = JobFromAnnotations({{"job", "llama-recipes/lora_single.yaml"}});
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
  EXPECT_EQ((*job)->job_configmap, "llama-recipes");
  EXPECT_EQ((*job)->job_key, "lora_single.yaml");
  EXPECT_EQ((*job)->request.batches_size(), 0);
  for (const char* bad :
       {"no-slash", "Upper/key", "/key", "cm/", "cm/a b", "cm/../etc"}) {
    auto wrong = JobFromAnnotations({{"job", bad}});
    ASSERT_FALSE(wrong.ok()) << bad;
    EXPECT_NE(wrong.status().message().find("CONFIGMAP/KEY"), std::string::npos)
        << wrong.status();
  }
}

// The pod shapes the Kubeflow training operator and JobSet create, and
// plain one- and eight-GPU pods (tests/data/extender/SOURCES.md cites each
// field): every node's verdict is the planner's answer to the question the
// CLI asks with the same words as flags, on that node's card.
struct GoldenPod {
  const char* file;
  std::vector<std::pair<std::string, std::string>> flags;  // the CLI's
  uint32_t gpus;                                           // setup.gpus
  uint32_t gpus_per_node;
  // Per node, in the body's order: whether it has room (not DOES_NOT_FIT);
  // empty: not pinned.
  std::vector<bool> room;
};

TEST_F(ExtenderTest, PodShapesGetTheCliAnswer) {
  const std::vector<std::pair<std::string, std::string>> fsdp70 = {
      {"--positions", "4096"},
      {"--precision", "bf16"},
      {"--optimizer", "adamw"},
      {"--parallel", "fsdp-full"},
      {"--checkpointing", "full"},
      {"--attention", "flash"},
      {"--gpus", "32"},
      {"--gpus_per_node", "8"}};
  const GoldenPod pods[] = {
      {"single-gpu-lora.json",
       {{"--positions", "2048"},
        {"--precision", "bf16-true"},
        {"--optimizer", "adamw"},
        {"--lora_rank", "16"},
        {"--lora_targets", "q,k,v,o"},
        {"--attention", "sdpa"},
        {"--checkpointing", "full"},
        {"--grad_accum", "2"},
        {"--framework", "torchtune"}},
       0,
       0,
       {}},
      {"multi-gpu-fsdp-8.json",
       {{"--positions", "2048"},
        {"--precision", "bf16"},
        {"--optimizer", "adamw"},
        {"--parallel", "fsdp-full"},
        {"--checkpointing", "full"},
        {"--attention", "sdpa"},
        {"--gpus", "8"}},
       8,
       0,
       {true, true, false}},
      {"pytorchjob-worker-8gpu.json", fsdp70, 32, 8, {}},
      {"jobset-worker-4x8gpu.json", fsdp70, 32, 8, {}},
  };
  std::vector<std::vector<v1::Verdict>> gang_verdicts;
  for (const GoldenPod& golden : pods) {
    SCOPED_TRACE(golden.file);
    absl::StatusOr<ExtenderArgs> args =
        ParseExtenderArgs(ExtenderBody(golden.file));
    ASSERT_TRUE(args.ok()) << args.status();
    auto job = JobFromAnnotations(args->annotations, args->gpus);
    ASSERT_TRUE(job.ok() && job->has_value()) << job.status();
    EXPECT_EQ((*job)->request.setup().gpus(), golden.gpus);
    EXPECT_EQ((*job)->request.setup().gpus_per_node(), golden.gpus_per_node);

    // The CLI's request: the same words as flags.
    v1::CheckFitRequest cli = (*job)->request;
    cli.clear_setup();
    SetupExtras extras;
    for (const auto& [flag, value] : golden.flags) {
      const SetupKey* key = FindSetupKey(flag.substr(2));
      ASSERT_NE(key, nullptr) << flag;
      ASSERT_TRUE(
          ApplySetupValue(*key, value, flag, cli.mutable_setup(), &extras)
              .ok());
    }
    EXPECT_EQ(cli.setup().SerializeAsString(),
              (*job)->request.setup().SerializeAsString());

    std::vector<std::optional<v1::Target>> targets;
    for (const ExtenderNode& node : args->nodes) {
      targets.push_back(TargetFromLabels(node));
      ASSERT_TRUE(targets.back().has_value()) << node.name;
      *cli.add_targets() = *targets.back();
    }
    auto decided = DecideNodes(**job, *args, targets, CheckFit(), {});
    ASSERT_TRUE(decided.ok()) << decided.status();
    auto answer = planner_->CheckFit(cli, evidence_->get());
    ASSERT_TRUE(answer.ok()) << answer.status();
    std::vector<v1::Verdict> verdicts;
    std::vector<bool> room;
    for (size_t i = 0; i < decided->size(); ++i) {
      const NodeDecision& d = (*decided)[i];
      EXPECT_EQ(d.verdict, answer->targets(i).verdicts(0)) << d.node;
      EXPECT_EQ(d.peak_gb, answer->targets(i).batches(0).figures().device_gb());
      verdicts.push_back(d.verdict);
      room.push_back(d.verdict != v1::DOES_NOT_FIT);
    }
    // Eight H100s hold the 8B model sharded (one does not: the test
    // above); eight L4s do not.
    if (!golden.room.empty()) {
      EXPECT_EQ(room, golden.room);
    }
    if (golden.gpus == 32) gang_verdicts.push_back(verdicts);
  }
  // A PyTorchJob's worker and a JobSet's are the same job on the same
  // nodes: the same answer.
  ASSERT_EQ(gang_verdicts.size(), 2u);
  EXPECT_EQ(gang_verdicts[0], gang_verdicts[1]);
}

}  // namespace
}  // namespace headroom
