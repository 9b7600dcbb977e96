#ifndef HEADROOM_CORE_SCHEDULING_EXTENDER_H_
#define HEADROOM_CORE_SCHEDULING_EXTENDER_H_

// The Kubernetes scheduler extender protocol (k8s.io/kube-scheduler
// extender/v1: ExtenderArgs in, ExtenderFilterResult or HostPriorityList
// out), answered from CheckFit: a pod says what it trains with annotations
// (headroom.dev/model, headroom.dev/batch, ...), a node's GPU comes from
// GPU Feature Discovery's labels or from the worker that runs on it. Plain
// C++ over strings and API messages; the HTTP side and the time budget are
// the service's.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// One candidate node as the request names it.
struct ExtenderNode {
  std::string name;
  // GPU Feature Discovery labels, when the request carried full nodes:
  // nvidia.com/gpu.product ("NVIDIA-L4") and nvidia.com/gpu.memory (MiB).
  std::string gpu_product;
  double gpu_memory_mib = 0;
  // The node object as it came (answered back in Nodes when it passes).
  std::string item_json;
};

struct ExtenderArgs {
  std::string pod;  // namespace/name, for reasons and logs
  std::string pod_namespace;
  std::map<std::string, std::string> annotations;
  // nvidia.com/gpu the pod's containers ask for (limits, else requests).
  int gpus = 0;
  // Full nodes (Nodes.items) or names only (NodeNames, nodeCacheCapable).
  bool names_only = false;
  std::vector<ExtenderNode> nodes;
};

// Parses an ExtenderArgs body as kube-scheduler sends it (Go field names,
// matched without regard to case as Go's decoder does). INVALID_ARGUMENT
// names the field that is wrong.
absl::StatusOr<ExtenderArgs> ParseExtenderArgs(absl::string_view body);

// The job a pod describes.
struct PodJob {
  // A CheckFitRequest without targets. Its setup's gpus is the whole job's
  // GPU count: headroom.dev/world-size (or headroom.dev/gpus) for a gang job
  // whose pods each hold part of it (gpus_per_node the pod's count), else
  // the pod's nvidia.com/gpu request when over one.
  v1::CheckFitRequest request;
  // headroom.dev/job: the ConfigMap in the pod's namespace and the key that
  // hold the job's config file (the service reads it into request.job);
  // empty without one.
  std::string job_configmap;
  std::string job_key;
  // "8 GPUs (the pod's)", "32 GPUs in all, 8 per pod"; empty for one GPU.
  std::string gpus_text;
};

// The job a pod's annotations (headroom.dev/ stripped) and its GPU request
// describe, or nullopt for a pod with neither headroom.dev/model nor
// headroom.dev/job (it passes untouched). The setup annotations are the
// setup vocabulary's (core/setup/setup_words.h: headroom.dev/lora-rank,
// parallel, framework, ...); besides them model, batch, job, world-size and
// coverage. INVALID_ARGUMENT names the annotation and its allowed values.
absl::StatusOr<std::optional<PodJob>> JobFromAnnotations(
    const std::map<std::string, std::string>& annotations, int pod_gpus = 0);

// The card a node has: a catalog GPU from the product label when its memory
// agrees with the memory label (MemoryAgrees: within 10 %), else the memory
// label as a bare size, else the product alone; nullopt when neither label
// says.
std::optional<v1::Target> TargetFromLabels(const ExtenderNode& node);

struct ExtenderOptions {
  // Let BORDERLINE nodes through the filter (default: FITS only).
  bool allow_borderline = false;
  // Prioritize: the most memory left free scores 10 (false: the tightest
  // fit, the least left free, scores 10).
  bool prefer_most_room = false;
  // A node whose GPU is unknown fails the filter (false: it passes).
  bool fail_unknown_gpu = true;
  // Let simulated workers' cards name a node's GPU, and simulated runs
  // anchor the answers (--extender_include_simulated).
  bool include_simulated = false;
};

// One node's verdict for the job.
struct NodeDecision {
  std::string node;
  bool known = false;  // its GPU is known
  bool passes = false;
  v1::Verdict verdict = v1::VERDICT_UNSPECIFIED;
  double card_gb = 0;
  // What the device holds at the job's largest phase, and its upper bound
  // (TargetBatch.figures.device_gb / device_upper_gb): what the verdict
  // and the scores compare with the card. From a planner without device
  // figures: the allocator's peak and peak x k.
  double peak_gb = 0;
  double upper_gb = 0;
  // The allocator's and the caching allocator's figures, and the phase that
  // decides (empty without device figures).
  double allocated_gb = 0;
  double reserved_gb = 0;
  std::string phase;
  // Why it fails, or what it was checked as.
  std::string reason;
};

// Answers CheckFit requests (the planner with its evidence).
using CheckFitFn = std::function<absl::StatusOr<v1::CheckFitResponse>(
    const v1::CheckFitRequest&)>;

// Decides every node: one CheckFit per distinct card (at most
// kMaxTargetsPerRequest per call). `targets` has one entry per node, in
// order (nullopt: unknown GPU). Errors are CheckFit's (an unknown template
// is NOT_FOUND naming the annotation's value).
absl::StatusOr<std::vector<NodeDecision>> DecideNodes(
    const PodJob& job, const ExtenderArgs& args,
    const std::vector<std::optional<v1::Target>>& targets,
    const CheckFitFn& check_fit, const ExtenderOptions& options);

// ExtenderFilterResult JSON: the passing nodes (Nodes or NodeNames, as
// asked), verdict failures in FailedAndUnresolvableNodes (preemption frees
// no GPU memory), unknown GPUs in FailedNodes.
std::string FilterResultJson(const ExtenderArgs& args,
                             const std::vector<NodeDecision>& decisions);

// Every node passes (a pod without annotations, or the budget ran out);
// `error` fills Error when non-empty.
std::string PassThroughFilterJson(const ExtenderArgs& args);

// Every node fails with `reason` (a pod whose annotations are wrong).
std::string FailAllFilterJson(const ExtenderArgs& args,
                              const std::string& reason);

// HostPriorityList JSON: 0..10 by the GPU memory left free above the
// device upper bound (NodeDecision.upper_gb), among the nodes that pass; 0
// for the others.
std::string PriorityListJson(const ExtenderArgs& args,
                             const std::vector<NodeDecision>& decisions,
                             const ExtenderOptions& options);

// Every node scores 0.
std::string ZeroPriorityListJson(const ExtenderArgs& args);

}  // namespace headroom

#endif  // HEADROOM_CORE_SCHEDULING_EXTENDER_H_
