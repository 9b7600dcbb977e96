#include "core/scheduling/extender.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/units.h"
#include "base/value_bounds.h"
#include "core/catalog/gpu_catalog.h"
#include "core/memory/fit_verdict.h"
#include "core/memory/parallel.h"
#include "core/planner/fit_planner.h"
#include "core/setup/setup_words.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace headroom {
namespace {

using Json = nlohmann::json;

// Longest echoed value in an error message.
constexpr size_t kMaxEcho = 200;
// Most candidate nodes one request may carry.
constexpr size_t kMaxNodes = 20000;

constexpr char kAnnotationPrefix[] = "headroom.dev/";

std::string Cut(absl::string_view value) {
  return std::string(value.substr(0, kMaxEcho));
}

// simdjson's on-demand parser reads the body once, in place; the node
// objects that pass are answered back as the exact bytes that came.
namespace od = simdjson::ondemand;

absl::Status NotA(const std::string& where, const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(where, " must be ", what));
}

// simdjson speaks std::string_view; this abseil has its own string_view.
absl::string_view Absl(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

// Go's decoder matches struct fields without regard to case; so do these.
bool KeyIs(std::string_view key, absl::string_view name) {
  return absl::EqualsIgnoreCase(Absl(key), name);
}

bool IsNull(od::value& value) {
  bool null = false;
  return !value.is_null().get(null) && null;
}

// A Kubernetes quantity of whole units ("2" or 2); -1 otherwise.
int WholeQuantity(od::value value) {
  od::json_type type;
  if (value.type().get(type)) return -1;
  if (type == od::json_type::number) {
    int64_t n = -1;
    if (value.get_int64().get(n) || n < 0 || n > 1 << 20) return -1;
    return static_cast<int>(n);
  }
  std::string_view text;
  int n = -1;
  if (type != od::json_type::string || value.get_string().get(text) ||
      !absl::SimpleAtoi(Absl(text), &n)) {
    return -1;
  }
  return n;
}

// nvidia.com/gpu of one container (limits win over requests); -1 when the
// value is not a whole number.
absl::StatusOr<int> ContainerGpus(od::value container, size_t index) {
  od::object object;
  if (container.get_object().get(object)) {
    return NotA(absl::StrCat("Pod.spec.containers[", index, "]"), "an object");
  }
  int limits = -2, requests = -2;  // -2: not given
  for (auto field : object) {
    std::string_view key;
    if (field.unescaped_key().get(key) || !KeyIs(key, "resources")) continue;
    od::object resources;
    if (field.value().get_object().get(resources)) continue;
    for (auto kind : resources) {
      std::string_view which;
      if (kind.unescaped_key().get(which)) continue;
      const bool is_limits = which == "limits";
      if (!is_limits && which != "requests") continue;
      od::object list;
      if (kind.value().get_object().get(list)) continue;
      for (auto entry : list) {
        std::string_view name;
        if (entry.unescaped_key().get(name) || name != "nvidia.com/gpu") {
          continue;
        }
        const int n = WholeQuantity(entry.value());
        if (n < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "Pod.spec.containers[", index, "].resources.", Absl(which),
              "[\"nvidia.com/gpu\"] is not a whole number of GPUs"));
        }
        (is_limits ? limits : requests) = n;
      }
    }
  }
  return limits >= 0 ? limits : std::max(0, requests);
}

absl::Status ParsePod(od::value pod_value, ExtenderArgs* args) {
  od::object pod;
  if (pod_value.get_object().get(pod)) return NotA("Pod", "an object");
  std::string name, ns;
  for (auto field : pod) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return NotA("Pod", "an object");
    if (KeyIs(key, "metadata")) {
      od::object metadata;
      if (field.value().get_object().get(metadata)) {
        return NotA("Pod.metadata", "an object");
      }
      for (auto item : metadata) {
        std::string_view item_key;
        if (item.unescaped_key().get(item_key)) continue;
        od::value value = item.value();
        if (KeyIs(item_key, "name") || KeyIs(item_key, "namespace")) {
          std::string_view text;
          if (!value.get_string().get(text)) {
            (KeyIs(item_key, "name") ? name : ns) = std::string(text);
          }
        } else if (KeyIs(item_key, "annotations")) {
          if (IsNull(value)) continue;
          od::object annotations;
          if (value.get_object().get(annotations)) {
            return NotA("Pod.metadata.annotations", "an object of strings");
          }
          for (auto annotation : annotations) {
            std::string_view akey, avalue;
            if (annotation.unescaped_key().get(akey)) continue;
            if (akey.rfind(kAnnotationPrefix, 0) != 0) continue;
            if (annotation.value().get_string().get(avalue)) {
              return NotA(absl::StrCat("Pod.metadata.annotations[\"",
                                       Cut(Absl(akey)), "\"]"),
                          "a string");
            }
            args->annotations[std::string(akey.substr(
                sizeof(kAnnotationPrefix) - 1))] = std::string(avalue);
          }
        }
      }
    } else if (KeyIs(key, "spec")) {
      od::object spec;
      if (field.value().get_object().get(spec)) {
        return NotA("Pod.spec", "an object");
      }
      for (auto item : spec) {
        std::string_view item_key;
        if (item.unescaped_key().get(item_key) ||
            !KeyIs(item_key, "containers")) {
          continue;
        }
        od::array containers;
        if (item.value().get_array().get(containers)) {
          return NotA("Pod.spec.containers", "a list");
        }
        size_t index = 0;
        for (auto container : containers) {
          od::value value;
          if (container.get(value)) {
            return NotA("Pod.spec.containers", "a list");
          }
          absl::StatusOr<int> gpus = ContainerGpus(value, index++);
          if (!gpus.ok()) return gpus.status();
          args->gpus += *gpus;
        }
      }
    }
  }
  args->pod = ns.empty() ? name : absl::StrCat(ns, "/", name);
  args->pod_namespace = ns;
  return absl::OkStatus();
}

// One node object: its name and GFD labels, and its bytes as they came.
// `raw` lies inside the request's padded buffer, `capacity` bytes from its
// start to the buffer's allocated end: it is read in place (simdjson needs
// SIMDJSON_PADDING bytes allocated past the text, whatever they hold:
// simdjson include/simdjson/generic/ondemand/parser.h, parser::iterate @
// v3.0.1, 0d2455029d845e801809dd54b01ae47173d7d8e8).
absl::StatusOr<ExtenderNode> ParseNode(std::string_view raw, size_t capacity,
                                       size_t index) {
  static thread_local od::parser parser;
  const auto where = [index] {
    return absl::StrCat("Nodes.items[", index, "]");
  };
  od::document doc;
  od::object node_object;
  if (parser.iterate(raw.data(), raw.size(), capacity).get(doc) ||
      doc.get_object().get(node_object)) {
    return NotA(where(), "an object");
  }
  ExtenderNode node;
  for (auto field : node_object) {
    std::string_view key;
    if (field.unescaped_key().get(key) || !KeyIs(key, "metadata")) continue;
    od::object metadata;
    if (field.value().get_object().get(metadata)) {
      return NotA(absl::StrCat(where(), ".metadata"), "an object");
    }
    for (auto item : metadata) {
      std::string_view item_key;
      if (item.unescaped_key().get(item_key)) continue;
      if (KeyIs(item_key, "name")) {
        std::string_view name;
        if (!item.value().get_string().get(name)) node.name = std::string(name);
      } else if (KeyIs(item_key, "labels")) {
        od::object labels;
        if (item.value().get_object().get(labels)) continue;
        for (auto label : labels) {
          std::string_view lkey, lvalue;
          if (label.unescaped_key().get(lkey)) continue;
          const bool product = lkey == "nvidia.com/gpu.product";
          if (!product && lkey != "nvidia.com/gpu.memory") continue;
          if (label.value().get_string().get(lvalue)) continue;
          if (product) {
            node.gpu_product = std::string(lvalue);
          } else {
            double mib = 0;
            if (absl::SimpleAtod(Absl(lvalue), &mib) && mib > 0 &&
                mib < kMaxCardGb * 1000) {
              node.gpu_memory_mib = mib;
            }
          }
        }
      }
    }
  }
  if (node.name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ".metadata.name is required (a string)"));
  }
  node.item_json = std::string(raw);
  return node;
}

bool ParseBool(absl::string_view text, bool* out) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "1" || lower == "yes") {
    *out = true;
    return true;
  }
  if (lower == "false" || lower == "0" || lower == "no") {
    *out = false;
    return true;
  }
  return false;
}

absl::Status BadAnnotation(absl::string_view key, absl::string_view value,
                           absl::string_view allowed) {
  return absl::InvalidArgumentError(
      absl::StrCat("annotation ", kAnnotationPrefix, key, " = \"", Cut(value),
                   "\"; allowed ", allowed));
}

// Appends `text` as a JSON string exactly as nlohmann's dump() writes it:
// printable ASCII other than '"' and '\\' as it is, anything else through
// nlohmann itself (its escapes, and its refusal of invalid UTF-8).
void AppendJsonString(std::string_view text, std::string* out) {
  const bool plain = std::all_of(text.begin(), text.end(), [](char c) {
    return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
  });
  if (!plain) {
    out->append(Json(std::string(text)).dump());
    return;
  }
  out->push_back('"');
  out->append(text);
  out->push_back('"');
}

// Node name -> reason, in the order (byte order of the keys) and with the
// value (the last one set) a nlohmann object of them dumps.
using ReasonMap = std::map<std::string_view, const std::string*>;

void AppendObject(const ReasonMap& reasons, std::string* out) {
  out->push_back('{');
  bool first = true;
  for (const auto& [node, reason] : reasons) {
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(node, out);
    out->push_back(':');
    AppendJsonString(*reason, out);
  }
  out->push_back('}');
}

// ExtenderFilterResult: the passing nodes echoed as they came (Nodes.items)
// or by name (NodeNames), the failing ones with their reasons. Written
// directly into one string: at thousands of nodes building nlohmann values
// and dumping them was most of the call.
std::string FilterJson(const ExtenderArgs& args,
                       const std::vector<bool>& passes, const ReasonMap& failed,
                       const ReasonMap& unresolvable,
                       const std::string& error) {
  std::string out;
  size_t estimate = 128;
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    estimate += passes[i] ? args.nodes[i].item_json.size() +
                                args.nodes[i].name.size() + 4
                          : 0;
  }
  out.reserve(estimate);
  out.append("{\"Nodes\":");
  if (args.names_only) {
    out.append("null");
  } else {
    out.append("{\"items\":[");
    bool first = true;
    for (size_t i = 0; i < args.nodes.size(); ++i) {
      if (!passes[i]) continue;
      if (!first) out.push_back(',');
      first = false;
      out.append(args.nodes[i].item_json);
    }
    out.append("]}");
  }
  out.append(",\"NodeNames\":");
  if (args.names_only) {
    out.push_back('[');
    bool first = true;
    for (size_t i = 0; i < args.nodes.size(); ++i) {
      if (!passes[i]) continue;
      if (!first) out.push_back(',');
      first = false;
      AppendJsonString(args.nodes[i].name, &out);
    }
    out.push_back(']');
  } else {
    out.append("null");
  }
  out.append(",\"FailedNodes\":");
  AppendObject(failed, &out);
  out.append(",\"FailedAndUnresolvableNodes\":");
  AppendObject(unresolvable, &out);
  out.append(",\"Error\":");
  AppendJsonString(error, &out);
  out.push_back('}');
  return out;
}

// HostPriorityList, [{"Host":name,"Score":n},...], as nlohmann dumps it.
std::string PriorityJson(const ExtenderArgs& args,
                         const std::vector<int64_t>& scores) {
  std::string out = "[";
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append("{\"Host\":");
    AppendJsonString(args.nodes[i].name, &out);
    absl::StrAppend(&out, ",\"Score\":", scores[i], "}");
  }
  out.push_back(']');
  return out;
}

// headroom.dev/job: "configmap/key" in the pod's namespace (DNS-1123
// names, ConfigMap keys of [-._a-zA-Z0-9]).
absl::Status ParseJobRef(const std::string& value, PodJob* pod) {
  const size_t slash = value.find('/');
  const auto name_char = [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' ||
           c == '.';
  };
  const auto key_char = [](char c) {
    return absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_';
  };
  if (slash == std::string::npos || slash == 0 || slash > 253 ||
      value.size() - slash - 1 == 0 || value.size() - slash - 1 > 253 ||
      !std::all_of(value.begin(), value.begin() + slash, name_char) ||
      !std::all_of(value.begin() + slash + 1, value.end(), key_char)) {
    return BadAnnotation("job", value,
                         "CONFIGMAP/KEY: a ConfigMap in the pod's namespace "
                         "and the key holding the job's config file");
  }
  pod->job_configmap = value.substr(0, slash);
  pod->job_key = value.substr(slash + 1);
  return absl::OkStatus();
}

// headroom.dev/batch: required without a job file (which says its own).
absl::Status ReadBatch(const std::map<std::string, std::string>& annotations,
                       bool has_job, v1::CheckFitRequest* job) {
  auto batch = annotations.find("batch");
  if (batch == annotations.end() && has_job) return absl::OkStatus();
  uint32_t b = 0;
  if (batch == annotations.end() || !absl::SimpleAtoi(batch->second, &b) ||
      b == 0 || b > kMaxBatch) {
    return BadAnnotation("batch",
                         batch == annotations.end() ? "" : batch->second,
                         absl::StrCat("the per-GPU batch, 1..", kMaxBatch));
  }
  job->add_batches(b);
  return absl::OkStatus();
}

// One setup annotation, read by the setup vocabulary (core/setup), plus the
// older spellings pods already carry: checkpointing true/false and
// fused-attention.
absl::Status ApplyAnnotation(const std::string& key, const std::string& value,
                             v1::TrainingSetup* setup) {
  bool on = false;
  if (key == "fused-attention") {
    if (!ParseBool(value, &on)) return BadAnnotation(key, value, "true, false");
    if (on) setup->set_attention(v1::TrainingSetup::SDPA);
    return absl::OkStatus();
  }
  const SetupKey* setup_key = FindSetupKey(key);
  if (setup_key == nullptr || absl::StrContains(key, '_')) {
    std::vector<std::string> known = {"model", "batch", "job", "world-size",
                                      "coverage"};
    for (const SetupKey& k : SetupVocabulary()) {
      known.push_back(k.Annotation().substr(sizeof(kAnnotationPrefix) - 1));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("annotation ", kAnnotationPrefix, Cut(key),
                     " is unknown; allowed ", absl::StrJoin(known, ", ")));
  }
  std::string text = value;
  if (key == "checkpointing" && ParseBool(value, &on)) {
    text = on ? "full" : "none";
  }
  SetupExtras extras;
  RETURN_IF_ERROR(ApplySetupValue(
      *setup_key, text, absl::StrCat("annotation ", setup_key->Annotation()),
      setup, &extras));
  if (extras.min_gpus) {
    return BadAnnotation(key, value,
                         absl::StrCat("a GPU count 1..", kMaxGpus,
                                      " (a pod's GPUs are its nvidia.com/gpu "
                                      "request; auto is the CLI's)"));
  }
  return absl::OkStatus();
}

// The job's GPU count: headroom.dev/world-size (or headroom.dev/gpus) for a
// gang job whose pods each hold `pod_gpus`, else the pod's own
// nvidia.com/gpu request.
absl::Status SetGpus(uint32_t world, int pod_gpus, PodJob* pod) {
  v1::TrainingSetup* setup = pod->request.mutable_setup();
  if (world != 0 && setup->gpus() != 0 && setup->gpus() != world) {
    return BadAnnotation(
        "world-size", absl::StrCat(world),
        absl::StrCat("the same count as headroom.dev/gpus (", setup->gpus(),
                     "): both are the whole job's GPUs"));
  }
  if (world == 0) world = setup->gpus();
  const uint32_t per_pod = static_cast<uint32_t>(std::max(0, pod_gpus));
  if (world == 0) {
    if (per_pod > 1) setup->set_gpus(std::min<uint32_t>(per_pod, kMaxGpus));
    pod->gpus_text =
        per_pod > 1 ? absl::StrCat(per_pod, " GPUs (the pod's)") : "";
    return absl::OkStatus();
  }
  if (per_pod > 0 && world % per_pod != 0) {
    return BadAnnotation(
        "world-size", absl::StrCat(world),
        absl::StrCat("a multiple of the pod's nvidia.com/gpu (", per_pod,
                     "): the whole job's GPUs, over pods of equal size"));
  }
  setup->set_gpus(world);
  if (per_pod > 0 && world > per_pod && setup->gpus_per_node() == 0) {
    setup->set_gpus_per_node(per_pod);
  }
  pod->gpus_text =
      world > 1 ? absl::StrCat(world, " GPUs in all",
                               per_pod > 0 && world > per_pod
                                   ? absl::StrCat(", ", per_pod, " per pod")
                                   : "")
                : "";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExtenderArgs> ParseExtenderArgs(absl::string_view body) {
  static thread_local od::parser parser;
  const simdjson::padded_string padded(body.data(), body.size());
  // Where the buffer's allocation ends: a node's bytes are read in place.
  const char* const padded_end =
      padded.data() + padded.size() + simdjson::SIMDJSON_PADDING;
  od::document doc;
  od::object root;
  const absl::Status not_object = absl::InvalidArgumentError(
      "the body is not a JSON object (ExtenderArgs: Pod, Nodes or NodeNames)");
  if (parser.iterate(padded).get(doc) || doc.get_object().get(root)) {
    return not_object;
  }
  ExtenderArgs args;
  bool pod = false, nodes = false, names = false;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return not_object;
    od::value value;
    if (field.value().get(value)) return not_object;
    if (KeyIs(key, "Pod")) {
      if (IsNull(value)) continue;
      if (absl::Status parsed = ParsePod(value, &args); !parsed.ok()) {
        return parsed;
      }
      pod = true;
    } else if (KeyIs(key, "Nodes")) {
      if (IsNull(value)) continue;
      od::object list;
      if (value.get_object().get(list)) return NotA("Nodes", "an object");
      for (auto item : list) {
        std::string_view item_key;
        if (item.unescaped_key().get(item_key) || !KeyIs(item_key, "items")) {
          continue;
        }
        od::array items;
        if (item.value().get_array().get(items)) {
          return NotA("Nodes.items", "a list");
        }
        nodes = true;
        for (auto element : items) {
          if (args.nodes.size() >= kMaxNodes) {
            return absl::InvalidArgumentError(absl::StrCat(
                "Nodes.items has more than ", kMaxNodes, " nodes"));
          }
          od::value node_value;
          od::object node_object;
          std::string_view raw;
          if (element.get(node_value) ||
              node_value.get_object().get(node_object) ||
              node_object.raw_json().get(raw)) {
            return NotA(absl::StrCat("Nodes.items[", args.nodes.size(), "]"),
                        "an object");
          }
          absl::StatusOr<ExtenderNode> node =
              ParseNode(raw, padded_end - raw.data(), args.nodes.size());
          if (!node.ok()) return node.status();
          args.nodes.push_back(*std::move(node));
        }
      }
      if (!nodes) return NotA("Nodes.items", "a list");
    } else if (KeyIs(key, "NodeNames")) {
      if (IsNull(value)) continue;
      od::array list;
      if (value.get_array().get(list)) {
        return NotA("NodeNames", "a list of node names");
      }
      names = true;
      args.names_only = true;
      for (auto element : list) {
        std::string_view name;
        if (args.nodes.size() >= kMaxNodes) {
          return absl::InvalidArgumentError(
              absl::StrCat("NodeNames has more than ", kMaxNodes, " names"));
        }
        if (element.get_string().get(name)) {
          return NotA(absl::StrCat("NodeNames[", args.nodes.size(), "]"),
                      "a string");
        }
        ExtenderNode node;
        node.name = std::string(name);
        args.nodes.push_back(std::move(node));
      }
    }
  }
  if (!pod) return absl::InvalidArgumentError("Pod is required (an object)");
  if (!nodes && !names) {
    return absl::InvalidArgumentError(
        "Nodes or NodeNames is required (the candidate nodes)");
  }
  if (nodes && names) args.names_only = false;
  return args;
}

absl::StatusOr<std::optional<PodJob>> JobFromAnnotations(
    const std::map<std::string, std::string>& annotations, int pod_gpus) {
  auto model = annotations.find("model");
  auto job_file = annotations.find("job");
  if (model == annotations.end() && job_file == annotations.end()) {
    return std::nullopt;
  }
  PodJob pod;
  v1::CheckFitRequest& job = pod.request;
  if (model != annotations.end()) {
    if (model->second.empty() || model->second.size() > 128) {
      return BadAnnotation("model", model->second,
                           "a catalog model name (headroom models)");
    }
    job.mutable_model()->set_template_(model->second);
  }
  if (job_file != annotations.end()) {
    RETURN_IF_ERROR(ParseJobRef(job_file->second, &pod));
  }
  RETURN_IF_ERROR(ReadBatch(annotations, job_file != annotations.end(), &job));
  v1::TrainingSetup* setup = job.mutable_setup();
  uint32_t world = 0;
  for (const auto& [key, value] : annotations) {
    if (key == "model" || key == "batch" || key == "job") continue;
    if (key == "world-size") {
      if (!absl::SimpleAtoi(value, &world) || world == 0 || world > kMaxGpus) {
        return BadAnnotation(
            key, value,
            absl::StrCat("the whole job's GPU count, 1..", kMaxGpus));
      }
    } else if (key == "coverage") {
      double coverage = 0;
      if (!absl::SimpleAtod(value, &coverage) ||
          (coverage != 0.9 && coverage != 0.95)) {
        return BadAnnotation(key, value, "0.9, 0.95");
      }
      job.set_coverage(coverage);
    } else {
      RETURN_IF_ERROR(ApplyAnnotation(key, value, setup));
    }
  }
  RETURN_IF_ERROR(SetGpus(world, pod_gpus, &pod));
  return pod;
}

std::optional<v1::Target> TargetFromLabels(const ExtenderNode& node) {
  // GFD's product names write spaces as dashes ("NVIDIA-A100-SXM4-80GB").
  std::string product = node.gpu_product;
  std::replace(product.begin(), product.end(), '-', ' ');
  const std::string gpu =
      product.empty() ? "" : CatalogGpuForDriverName(product);
  // GFD reports MiB; cards are sized in GB (10^9 bytes).
  const double label_gb = node.gpu_memory_mib * 1048576.0 / 1e9;
  v1::Target target;
  if (!gpu.empty()) {
    absl::StatusOr<GpuInfo> info = FindGpu(gpu);
    if (info.ok() && (label_gb == 0 || MemoryAgrees(*info, label_gb))) {
      target.set_gpu(info->name);
      return target;
    }
  }
  if (label_gb > 0) {
    target.set_memory_gb(std::floor(label_gb * 100) / 100);
    return target;
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<NodeDecision>> DecideNodes(
    const PodJob& pod, const ExtenderArgs& args,
    const std::vector<std::optional<v1::Target>>& targets,
    const CheckFitFn& check_fit, const ExtenderOptions& options) {
  // Distinct cards, each checked once.
  std::vector<v1::Target> cards;
  std::map<std::string, size_t> card_of;  // serialized target -> index
  std::vector<int> node_card(args.nodes.size(), -1);
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    if (!targets[i].has_value()) continue;
    const std::string id = targets[i]->SerializeAsString();
    auto [it, inserted] = card_of.emplace(id, cards.size());
    if (inserted) cards.push_back(*targets[i]);
    node_card[i] = static_cast<int>(it->second);
  }
  const v1::CheckFitRequest& job = pod.request;
  std::vector<v1::TargetResult> results(cards.size());
  std::vector<v1::BatchEstimate> estimates(cards.size());
  std::string model = job.model().template_();
  for (size_t start = 0; start < cards.size(); start += kMaxTargetsPerRequest) {
    v1::CheckFitRequest request = job;
    request.set_include_simulated(options.include_simulated);
    const size_t end =
        std::min(cards.size(), start + size_t{kMaxTargetsPerRequest});
    for (size_t c = start; c < end; ++c) *request.add_targets() = cards[c];
    absl::StatusOr<v1::CheckFitResponse> answer = check_fit(request);
    if (!answer.ok()) {
      if (answer.status().code() == absl::StatusCode::kNotFound) {
        return absl::NotFoundError(absl::StrCat(
            "annotation headroom.dev/model: ", answer.status().message()));
      }
      return answer.status();
    }
    for (size_t c = start; c < end; ++c) {
      results[c] = answer->targets(static_cast<int>(c - start));
      estimates[c] = answer->estimates(0);
    }
    if (model.empty()) model = answer->model();
  }
  // A job file says its own batch; the answer carries it.
  const uint32_t asked_batch = job.batches_size() > 0 ? job.batches(0) : 0;
  const std::string on_gpus =
      pod.gpus_text.empty()
          ? ""
          : absl::StrCat(" on ", pod.gpus_text, ", ",
                         StrategyName(LayoutOf(job.setup()).strategy));
  // Nodes of one card share their decision (the reason is most of the
  // work): each card's is made once, then copied per node.
  NodeDecision unknown;
  unknown.passes = !options.fail_unknown_gpu;
  unknown.reason =
      "headroom: the node's GPU is unknown (no nvidia.com/gpu.product or "
      "nvidia.com/gpu.memory label, and no connected headroom-worker "
      "reports this node)";
  std::vector<NodeDecision> by_card;
  by_card.reserve(cards.size());
  for (size_t c = 0; c < cards.size(); ++c) {
    const v1::TargetResult& result = results[c];
    NodeDecision d;
    d.known = true;
    d.card_gb = result.memory_gb();
    d.verdict = static_cast<v1::Verdict>(result.verdicts(0));
    d.passes = d.verdict == v1::FITS ||
               (options.allow_borderline && d.verdict == v1::BORDERLINE);
    const uint32_t batch =
        result.batches_size() > 0 ? result.batches(0).batch() : asked_batch;
    d.reason = absl::StrCat("headroom: ", model, " at batch ", batch, on_gpus,
                            " is ", v1::Verdict_Name(d.verdict), " on ",
                            result.name(), " (", FormatGb(d.card_gb, 1), ")",
                            pod.gpus_text.empty() ? "" : " per GPU", ": ");
    if (result.batches_size() > 0) {
      // The verdict was taken on the device figure: say it and score by it.
      const v1::TargetBatch& answer = result.batches(0);
      d.peak_gb = answer.figures().device_gb();
      d.upper_gb = answer.figures().device_upper_gb();
      d.allocated_gb = answer.figures().allocated_gb();
      d.reserved_gb = answer.figures().reserved_gb();
      d.phase = answer.phase();
      absl::StrAppend(&d.reason, "device ", FormatGb(d.peak_gb, 1),
                      " (allocated ", FormatGb(d.allocated_gb, 1),
                      ", reserved ", FormatGb(d.reserved_gb, 1), ") in the ",
                      d.phase, " phase, upper bound ", FormatGb(d.upper_gb, 1));
    } else {
      d.peak_gb = result.peaks_gb(0);
      d.upper_gb = d.peak_gb * estimates[c].k();
      absl::StrAppend(&d.reason, "predicted peak ", FormatGb(d.peak_gb, 1),
                      ", upper bound ", FormatGb(d.upper_gb, 1));
    }
    absl::StrAppend(&d.reason, "; largest batch FITS ",
                    result.max_batch_fits());
    by_card.push_back(std::move(d));
  }
  std::vector<NodeDecision> decisions;
  decisions.reserve(args.nodes.size());
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    decisions.push_back(node_card[i] < 0 ? unknown : by_card[node_card[i]]);
    decisions.back().node = args.nodes[i].name;
  }
  return decisions;
}

std::string FilterResultJson(const ExtenderArgs& args,
                             const std::vector<NodeDecision>& decisions) {
  std::vector<bool> passes(args.nodes.size(), false);
  ReasonMap failed, unresolvable;
  for (size_t i = 0; i < decisions.size() && i < args.nodes.size(); ++i) {
    passes[i] = decisions[i].passes;
    if (decisions[i].passes) continue;
    (decisions[i].known ? unresolvable : failed)[decisions[i].node] =
        &decisions[i].reason;
  }
  return FilterJson(args, passes, failed, unresolvable, "");
}

std::string PassThroughFilterJson(const ExtenderArgs& args) {
  return FilterJson(args, std::vector<bool>(args.nodes.size(), true), {}, {},
                    "");
}

std::string FailAllFilterJson(const ExtenderArgs& args,
                              const std::string& reason) {
  ReasonMap unresolvable;
  for (const ExtenderNode& node : args.nodes) unresolvable[node.name] = &reason;
  return FilterJson(args, std::vector<bool>(args.nodes.size(), false), {},
                    unresolvable, "");
}

std::string PriorityListJson(const ExtenderArgs& args,
                             const std::vector<NodeDecision>& decisions,
                             const ExtenderOptions& options) {
  double lo = 0, hi = 0;
  bool any = false;
  for (const NodeDecision& d : decisions) {
    if (!d.passes || !d.known) continue;
    const double free_gb = d.card_gb - d.upper_gb;
    lo = any ? std::min(lo, free_gb) : free_gb;
    hi = any ? std::max(hi, free_gb) : free_gb;
    any = true;
  }
  std::vector<int64_t> scores(args.nodes.size(), 0);
  for (size_t i = 0; i < args.nodes.size(); ++i) {
    int64_t& score = scores[i];
    if (i < decisions.size() && decisions[i].passes && decisions[i].known) {
      const double free_gb = decisions[i].card_gb - decisions[i].upper_gb;
      // 0..1 from the least to the most room; one node (or all alike) 1.
      const double room = hi > lo ? (free_gb - lo) / (hi - lo) : 1.0;
      const double share = options.prefer_most_room ? room
                           : hi > lo                ? 1.0 - room
                                                    : 1.0;
      score = std::lround(10.0 * share);
    }
  }
  return PriorityJson(args, scores);
}

std::string ZeroPriorityListJson(const ExtenderArgs& args) {
  return PriorityJson(args, std::vector<int64_t>(args.nodes.size(), 0));
}

}  // namespace headroom
