#include "core/frontends/onnx_import.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_importer.h"
#include "core/frontends/onnx_shapes.h"
#include "onnx/onnx_pb.h"

namespace headroom {
namespace onnx_internal {
namespace {

bool IsSeparator(char c) { return c == '/' || c == '.' || c == ':'; }

}  // namespace

bool IsFloatType(int32_t type) {
  return type == onnx::TensorProto::FLOAT ||
         type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::DOUBLE ||
         type == onnx::TensorProto::BFLOAT16;
}

std::string CommonPrefix(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string prefix = names[0];
  for (const std::string& n : names) {
    size_t i = 0;
    while (i < prefix.size() && i < n.size() && prefix[i] == n[i]) ++i;
    prefix.resize(i);
  }
  bool whole = true;
  for (const std::string& n : names) {
    if (n.size() != prefix.size() && !IsSeparator(n[prefix.size()])) {
      whole = false;
    }
  }
  if (!whole) {
    const size_t cut = prefix.find_last_of("/.:");
    prefix = cut == std::string::npos ? "" : prefix.substr(0, cut);
  }
  while (!prefix.empty() && IsSeparator(prefix.back())) prefix.pop_back();
  return prefix;
}

std::string GroupName(const std::string& first, const std::string& last) {
  if (first == last) return first;
  const std::string prefix = CommonPrefix({first, last});
  size_t a = prefix.size();
  size_t b = prefix.size();
  std::string separator;
  if (a < first.size() && IsSeparator(first[a]) && b < last.size() &&
      last[b] == first[a]) {
    separator = std::string(1, first[a]);
    ++a;
    ++b;
  }
  const std::string head = first.substr(a);
  const std::string tail = last.substr(b);
  if (head.find_first_of("/.:") != std::string::npos ||
      tail.find_first_of("/.:") != std::string::npos || head.empty() ||
      tail.empty()) {
    return prefix.empty() ? first : prefix;
  }
  return absl::StrCat(prefix, separator, head, "+", tail);
}

absl::StatusOr<OnnxConversion> Importer::Run() {
  RETURN_IF_ERROR(CheckOnnxStructure(model_));
  RETURN_IF_ERROR(FindBatchAxis());
  RETURN_IF_ERROR(InferOnnxShapes(&model_));
  RETURN_IF_ERROR(Index());
  RETURN_IF_ERROR(CheckWeights());
  MatchEmbeddings();
  // Norms written out (exports before opset 17, RMSNorm): LayerNorm
  // first, whose variance branch would otherwise read as an RMSNorm.
  for (int i = 0; i < NodeCount(); ++i) {
    if (Op(i) == "ReduceMean" && !consumed_[i]) MatchLayerNormOps(i);
  }
  for (int i = 0; i < NodeCount(); ++i) {
    if ((Op(i) == "Pow" || Op(i) == "Mul") && !consumed_[i]) {
      MatchRmsNormOps(i);
    }
  }
  for (int i = 0; i < NodeCount(); ++i) {
    if (Op(i) == "Softmax" && !consumed_[i]) MatchAttention(i);
  }
  for (int i = 0; i < NodeCount(); ++i) {
    if (!consumed_[i] && Linear(i).has_value()) MatchMlp(i);
  }
  for (int i = 0; i < NodeCount(); ++i) {
    if (!consumed_[i]) RETURN_IF_ERROR(MapNode(i));
  }
  AddUnclaimedWeights();
  return Assemble();
}

}  // namespace onnx_internal

namespace {

absl::StatusOr<onnx::ModelProto> ParseModel(absl::string_view bytes) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "ONNX model is empty; expected a serialized ONNX ModelProto");
  }
  if (bytes.size() > kMaxOnnxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ONNX model is ", bytes.size(), " bytes; allowed up to ", kMaxOnnxBytes,
        " (the planner reads shapes only: send the graph without its "
        "weights, as `headroom` does, or exported with external data)"));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "not an ONNX model: the bytes do not parse as an ONNX ModelProto "
        "(truncated, or another format)");
  }
  if (model.ir_version() < 1 || model.ir_version() > 100 ||
      !model.has_graph() || model.graph().node_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an ONNX model: ",
                     model.ir_version() < 1 || model.ir_version() > 100
                         ? absl::StrCat("ir_version ", model.ir_version(),
                                        " is out of range (ONNX uses 1..10)")
                         : std::string("it has no graph with nodes"),
                     " (truncated, or another format)"));
  }
  bool default_opset = false;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") default_opset = true;
  }
  if (!default_opset) {
    return absl::InvalidArgumentError(
        "ONNX model imports no opset of the default domain (opset_import "
        "with domain \"\"); the planner reads standard ONNX operators");
  }
  if (model.graph().node_size() > kMaxOnnxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX graph has ", model.graph().node_size(),
                     " nodes; allowed up to ", kMaxOnnxNodes));
  }
  return model;
}

}  // namespace

absl::StatusOr<OnnxConversion> SpecFromOnnx(absl::string_view model_bytes,
                                            const OnnxOptions& options) {
  ASSIGN_OR_RETURN(onnx::ModelProto model, ParseModel(model_bytes));
  onnx_internal::Importer importer(std::move(model), options);
  return importer.Run();
}

}  // namespace headroom
