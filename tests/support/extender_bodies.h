#ifndef HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_
#define HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_

// The scheduler extender's request bodies: the files under
// tests/data/extender/, and clusters of any size made here (the bench and
// the at-scale tests share them).

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace headroom::testing {

// The file's text ("" when it cannot be read).
inline std::string ExtenderBody(const std::string& name) {
  std::ifstream file(std::string(HEADROOM_SOURCE_DIR) +
                     "/tests/data/extender/" + name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// One kind of node by its GPU Feature Discovery labels; an empty value
// leaves that label out.
struct GfdKind {
  std::string product;     // nvidia.com/gpu.product
  std::string memory_mib;  // nvidia.com/gpu.memory
};

// Eight GPU kinds as GFD labels them (the service_bench's thousand nodes).
inline std::vector<GfdKind> EightGfdKinds() {
  return {{"NVIDIA-L4", "23034"},
          {"NVIDIA-A10G", "23028"},
          {"NVIDIA-H100-80GB-HBM3", "81559"},
          {"NVIDIA-H200", "143771"},
          {"NVIDIA-A100-SXM4-40GB", "40960"},
          {"NVIDIA-A100-SXM4-80GB", "81920"},
          {"Tesla-T4", "15360"},
          {"NVIDIA-L40S", "46068"}};
}

// The Pod of an ExtenderArgs: ml/train asking Headroom for `model` at
// `batch` per GPU, with one container limiting nvidia.com/gpu to `gpus`.
inline std::string ExtenderPod(const std::string& model, int batch,
                               int gpus = 1) {
  return "{\"metadata\":{\"name\":\"train\",\"namespace\":\"ml\","
         "\"annotations\":{\"headroom.dev/model\":\"" +
         model + "\",\"headroom.dev/batch\":\"" + std::to_string(batch) +
         "\"}},\"spec\":{\"containers\":[{\"name\":\"t\",\"resources\":{"
         "\"limits\":{\"nvidia.com/gpu\":\"" +
         std::to_string(gpus) + "\"}}}]}}";
}

// ExtenderArgs with full node objects (nodeCacheCapable: false): node-<i>
// has kind i % kinds.size(), its GFD labels among some usual others, and a
// status of 8 GPUs (424 bytes a node with the eight kinds).
inline std::string ClusterNodesBody(const std::string& pod, int nodes,
                                    const std::vector<GfdKind>& kinds) {
  std::string items;
  for (int i = 0; i < nodes; ++i) {
    const GfdKind& kind = kinds[static_cast<size_t>(i) % kinds.size()];
    const std::string name = "node-" + std::to_string(i);
    if (!items.empty()) items += ",";
    items += "{\"metadata\":{\"name\":\"" + name +
             "\",\"labels\":{\"kubernetes.io/hostname\":\"" + name +
             "\",\"kubernetes.io/os\":\"linux\",\"topology.kubernetes.io/"
             "zone\":\"zone-a\",\"nvidia.com/gpu.count\":\"8\",";
    if (!kind.product.empty()) {
      items += "\"nvidia.com/gpu.product\":\"" + kind.product + "\",";
    }
    if (!kind.memory_mib.empty()) {
      items += "\"nvidia.com/gpu.memory\":\"" + kind.memory_mib + "\",";
    }
    items +=
        "\"nvidia.com/cuda.driver.major\":\"550\"}},\"status\":{"
        "\"capacity\":{\"cpu\":\"96\",\"memory\":\"1056Gi\","
        "\"nvidia.com/gpu\":\"8\"},\"allocatable\":{\"cpu\":\"95\","
        "\"memory\":\"1050Gi\",\"nvidia.com/gpu\":\"8\"}}}";
  }
  return "{\"Pod\":" + pod + ",\"Nodes\":{\"items\":[" + items +
         "]},\"NodeNames\":null}";
}

// ExtenderArgs with names only (nodeCacheCapable: true): node-0 ..
// node-<nodes - 1>.
inline std::string ClusterNamesBody(const std::string& pod, int nodes) {
  std::string names;
  for (int i = 0; i < nodes; ++i) {
    if (!names.empty()) names += ",";
    names += "\"node-" + std::to_string(i) + "\"";
  }
  return "{\"Pod\":" + pod + ",\"Nodes\":null,\"NodeNames\":[" + names + "]}";
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_
