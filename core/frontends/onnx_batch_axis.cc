// The batch axis of a graph's inputs and the lengths bound with it
// (SpecFromOnnx's rules, onnx_import.h).

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_importer.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace onnx_internal {
namespace {

std::string DimsText(const std::vector<std::string>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

bool LooksLikeBatch(const std::string& symbol) {
  const std::string s = Lower(symbol);
  return s.find("batch") != std::string::npos || s == "n" || s == "b" ||
         s == "bs";
}

// Symbols every input has, in the first input's axis order; an unnamed
// dynamic dimension counts only when the graph has a single input.
std::vector<std::string> SharedSymbols(const std::vector<GraphInput>& inputs) {
  std::vector<std::string> shared;
  for (const std::string& symbol : inputs[0].symbols) {
    if (symbol.empty()) continue;
    if (symbol[0] == '?' && inputs.size() > 1) continue;
    bool everywhere = true;
    for (const GraphInput& in : inputs) {
      if (std::find(in.symbols.begin(), in.symbols.end(), symbol) ==
          in.symbols.end()) {
        everywhere = false;
      }
    }
    if (everywhere &&
        std::find(shared.begin(), shared.end(), symbol) == shared.end()) {
      shared.push_back(symbol);
    }
  }
  return shared;
}

}  // namespace

absl::Status Importer::FindBatchAxis() {
  ASSIGN_OR_RETURN(const std::vector<GraphInput> inputs, ReadInputs());
  if (inputs.empty()) {
    return absl::InvalidArgumentError(
        "graph has no inputs with a batch axis (no graph input of rank 1 "
        "or more); the planner needs the inputs a batch of samples enters "
        "through");
  }
  for (const GraphInput& in : inputs) {
    input_text_.push_back(absl::StrCat(in.name, " ", DimsText(in.text)));
  }
  RETURN_IF_ERROR(ChooseBatchAxis(inputs));
  RETURN_IF_ERROR(BindLengths(inputs));
  ApplyBindings();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<GraphInput>> Importer::ReadInputs() const {
  std::set<std::string> init_names;
  for (const auto& t : graph().initializer()) init_names.insert(t.name());
  std::vector<GraphInput> inputs;
  for (const auto& in : graph().input()) {
    if (init_names.count(in.name()) != 0) continue;
    if (!in.type().has_tensor_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", in.name(),
                       "' is not a tensor; the planner reads tensor inputs "
                       "only"));
    }
    if (!in.type().tensor_type().has_shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph input '", in.name(),
          "' has no shape; export the model with input shapes (a batch "
          "axis and the sample's dimensions)"));
    }
    const auto& shape = in.type().tensor_type().shape();
    GraphInput input{in.name(), {}, {}};
    for (int axis = 0; axis < shape.dim_size(); ++axis) {
      const auto& dim = shape.dim(axis);
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 1 ||
            static_cast<uint64_t>(dim.dim_value()) > kMaxSpecDimension) {
          return absl::InvalidArgumentError(
              absl::StrCat("graph input '", in.name(), "' dims[", axis,
                           "] = ", dim.dim_value(),
                           " is out of range; allowed 1..", kMaxSpecDimension));
        }
        input.symbols.push_back("");
        input.text.push_back(absl::StrCat(dim.dim_value()));
      } else if (!dim.dim_param().empty()) {
        input.symbols.push_back(dim.dim_param());
        input.text.push_back(dim.dim_param());
      } else {
        input.symbols.push_back(absl::StrCat("?", in.name(), ":", axis));
        input.text.push_back("?");
      }
    }
    if (!input.symbols.empty()) inputs.push_back(std::move(input));
  }
  return inputs;
}

absl::Status Importer::ChooseBatchAxis(const std::vector<GraphInput>& inputs) {
  // (1) A symbol every input has.
  const std::vector<std::string> shared = SharedSymbols(inputs);
  if (!shared.empty()) {
    batch_symbol_ = shared[0];
    for (const std::string& s : shared) {
      if (LooksLikeBatch(s)) {
        batch_symbol_ = s;
        break;
      }
    }
    std::vector<std::string> where;
    for (const GraphInput& in : inputs) {
      const int axis = static_cast<int>(
          std::find(in.symbols.begin(), in.symbols.end(), batch_symbol_) -
          in.symbols.begin());
      where.push_back(absl::StrCat(in.name, " axis ", axis));
    }
    batch_axis_ = absl::StrCat(
        "batch axis: ",
        batch_symbol_[0] == '?'
            ? std::string("the dynamic dimension")
            : absl::StrCat("symbolic dimension '", batch_symbol_, "'"),
        " (", absl::StrJoin(where, ", "), ")",
        shared.size() > 1 && inputs.size() > 1
            ? absl::StrCat("; every input shares ", absl::StrJoin(shared, ", "),
                           ": this one is named like a batch or comes first")
            : "");
    return absl::OkStatus();
  }
  // (2) A leading dimension of one fixed size in every input.
  bool fixed = true;
  int64_t n = -1;
  for (const GraphInput& in : inputs) {
    if (!in.symbols[0].empty()) {
      fixed = false;
      break;
    }
    const int64_t size = std::stoll(in.text[0]);
    if (n >= 0 && size != n) fixed = false;
    n = size;
  }
  if (!fixed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph inputs have no batch axis: no symbolic dimension is shared "
        "by every input and their leading dimensions differ (",
        absl::StrJoin(input_text_, ", "),
        "), so the graph is one fixed computation whatever the batch; "
        "export it with a dynamic batch axis (torch.onnx.export "
        "dynamic_axes={\"input\": {0: \"batch\"}})"));
  }
  batch_divisor_ = static_cast<uint64_t>(n);
  batch_axis_ = absl::StrCat(
      "batch axis: axis 0 of every input, exported "
      "at batch ",
      n, " (sizes divided by ", n, ")");
  return absl::OkStatus();
}

absl::Status Importer::BindLengths(const std::vector<GraphInput>& inputs) {
  // Every other symbol is a length the caller binds.
  for (const GraphInput& in : inputs) {
    for (size_t axis = 0; axis < in.symbols.size(); ++axis) {
      const std::string& s = in.symbols[axis];
      if (s.empty() || s == batch_symbol_ || bound_.count(s) != 0) continue;
      if (options_.positions == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph input '", in.name, "' axis ", axis, " is symbolic (",
            s[0] == '?' ? "unnamed" : absl::StrCat("'", s, "'"),
            ") and is not the batch; give the number of positions to bind "
            "it (setup.positions, --positions)"));
      }
      if (options_.positions > kMaxSpecDimension) {
        return absl::InvalidArgumentError(
            absl::StrCat("positions = ", options_.positions,
                         " is out of range; allowed 1..", kMaxSpecDimension));
      }
      bound_.insert(s);
      notes_.push_back(absl::StrCat(
          "symbolic dimension ",
          s[0] == '?' ? absl::StrCat("at ", in.name, " axis ", axis)
                      : absl::StrCat("'", s, "'"),
          " bound to ", options_.positions, " positions"));
    }
  }
  if (options_.positions != 0 && bound_.empty()) {
    notes_.push_back(
        absl::StrCat("positions = ", options_.positions,
                     " not used: the graph's inputs fix every length"));
  }
  return absl::OkStatus();
}

void Importer::ApplyBindings() {
  std::set<std::string> init_names;
  for (const auto& t : graph().initializer()) init_names.insert(t.name());
  auto bind = [&](onnx::ValueInfoProto* info, bool is_input) {
    if (!info->type().has_tensor_type() ||
        !info->type().tensor_type().has_shape()) {
      return;
    }
    auto* shape = info->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int axis = 0; axis < shape->dim_size(); ++axis) {
      auto* dim = shape->mutable_dim(axis);
      if (dim->has_dim_value()) continue;
      const std::string symbol =
          !dim->dim_param().empty()
              ? dim->dim_param()
              : (is_input ? absl::StrCat("?", info->name(), ":", axis) : "");
      if (symbol.empty()) continue;
      if (symbol == batch_symbol_) {
        dim->set_dim_value(1);
      } else if (bound_.count(symbol) != 0) {
        dim->set_dim_value(static_cast<int64_t>(options_.positions));
      }
    }
  };
  onnx::GraphProto* g = model_.mutable_graph();
  for (auto& in : *g->mutable_input()) {
    if (init_names.count(in.name()) == 0) bind(&in, true);
  }
  for (auto& out : *g->mutable_output()) bind(&out, false);
  for (auto& info : *g->mutable_value_info()) bind(&info, false);
}

}  // namespace onnx_internal
}  // namespace headroom
