// The spec a graph's matched layers make: layers in graph order with the
// common positions factored out and repeats compressed into blocks, the
// source, the notes, and the checks that the count is the graph's.

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/frontends/onnx_importer.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace onnx_internal {

using v1::Layer;

absl::StatusOr<OnnxConversion> Importer::Assemble() {
  OnnxConversion out;
  v1::ModelSpec& spec = out.spec;
  spec.set_name(SpecName());
  AddLayers(&spec);
  if (spec.layers().empty()) {
    return absl::InvalidArgumentError(
        "graph has no weights and no per-sample activations: nothing for "
        "the memory model to count");
  }
  Describe(&spec);
  // The spec's notes; the conversion's notes lead with the batch axis,
  // which the spec keeps in input_source.
  std::vector<std::string> notes = CollectNotes();
  spec.set_notes(absl::StrJoin(notes, "; "));
  notes.insert(notes.begin(), batch_axis_);

  const absl::Status valid = ValidateSpec(spec);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the graph converts to a spec the planner cannot use: ",
                     valid.message()));
  }
  if (static_cast<double>(CountParams(spec)) != total_params_) {
    return absl::InternalError(absl::StrCat(
        "ONNX import counted ", CountParams(spec),
        " parameters in layers but the initializers hold ", total_params_));
  }
  out.batch_axis = batch_axis_;
  out.notes = std::move(notes);
  return out;
}

void Importer::AddLayers(v1::ModelSpec* spec) {
  std::stable_sort(
      groups_.begin(), groups_.end(),
      [](const Group& a, const Group& b) { return a.anchor < b.anchor; });
  bool conv = false;
  bool recurrent = false;
  std::map<uint64_t, int> positions_count;
  for (const Group& g : groups_) {
    if (g.layer.has_conv()) conv = true;
    if (g.layer.has_recurrent()) recurrent = true;
    if (g.layer.positions() != 0) ++positions_count[g.layer.positions()];
  }
  spec->set_family(attention_layers_ > 0 ? "transformer"
                   : recurrent           ? "recurrent"
                   : conv                ? "conv"
                                         : "other");
  uint64_t positions = 0;
  int best = 0;
  for (const auto& [p, count] : positions_count) {
    if (count >= best) {
      best = count;
      positions = p;
    }
  }
  spec->set_positions(positions);
  std::vector<Layer> layers;
  layers.reserve(groups_.size());
  for (Group& g : groups_) {
    if (g.layer.positions() == positions) g.layer.set_positions(0);
    layers.push_back(std::move(g.layer));
  }
  for (Layer& layer : CompressRepeats(std::move(layers))) {
    *spec->add_layers() = std::move(layer);
  }
}

void Importer::Describe(v1::ModelSpec* spec) const {
  std::string opset = "?";
  for (const auto& o : model_.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      opset = absl::StrCat(o.version());
    }
  }
  spec->set_source(absl::StrCat(
      "ONNX graph '", graph().name(), "' (IR version ", model_.ir_version(),
      ", opset ", opset,
      model_.producer_name().empty()
          ? std::string()
          : absl::StrCat(", from ", model_.producer_name(),
                         model_.producer_version().empty() ? "" : " ",
                         model_.producer_version()),
      "), ", NodeCount(),
      " nodes, mapped to layers by headroom's ONNX "
      "front-end."));
  spec->set_input_source(absl::StrCat(
      "graph inputs ", absl::StrJoin(input_text_, ", "), "; ", batch_axis_));
}

std::vector<std::string> Importer::CollectNotes() {
  std::vector<std::string> notes = std::move(notes_);
  if (!unmatched_softmax_.empty()) {
    std::vector<std::string> names;
    for (int s : unmatched_softmax_) names.push_back(NodeLabel(s));
    if (names.size() > 3) names.resize(3);
    notes.push_back(absl::StrCat(
        unmatched_softmax_.size(),
        " Softmax nodes are not fed by a recognizable attention (a "
        "MatMul of linear Q and K projections, then a MatMul with V and "
        "an output projection) and count as element-wise softmax: ",
        absl::StrJoin(names, ", ")));
  }
  if (activation_matmuls_ > 0) {
    notes.push_back(absl::StrCat(
        activation_matmuls_,
        " MatMul nodes multiply two activations outside attention; their "
        "outputs are not counted"));
  }
  if (!unknown_shape_ops_.empty()) {
    notes.push_back(
        absl::StrCat("outputs of ", absl::StrJoin(unknown_shape_ops_, ", "),
                     " nodes have no inferred shape and add nothing"));
  }
  if (!foreign_ops_.empty()) {
    notes.push_back(
        absl::StrCat("operators the importer does not know are not analysed: ",
                     absl::StrJoin(foreign_ops_, ", ")));
  }
  return notes;
}

std::string Importer::SpecName() const {
  std::string raw = !options_.name.empty()    ? options_.name
                    : !graph().name().empty() ? graph().name()
                                              : "onnx-model";
  std::string name;
  for (char c : raw) {
    const char l = static_cast<char>(std::tolower(c));
    if (std::isalnum(static_cast<unsigned char>(l))) {
      name.push_back(l);
    } else if (!name.empty() && name.back() != '-') {
      name.push_back('-');
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name.empty() ? "onnx-model" : name;
}

std::vector<Layer> CompressRepeats(std::vector<Layer> layers) {
  const size_t n = layers.size();
  if (n < 2 || n > 20000) return layers;
  std::vector<std::string> keys(n);
  for (size_t i = 0; i < n; ++i) {
    Layer copy = layers[i];
    copy.clear_name();
    keys[i] = copy.SerializeAsString();
  }
  auto same = [&](size_t a, size_t b, size_t len) {
    for (size_t k = 0; k < len; ++k) {
      if (keys[a + k] != keys[b + k]) return false;
    }
    return true;
  };
  std::vector<Layer> out;
  size_t i = 0;
  while (i < n) {
    size_t best_len = 0;
    size_t best_repeat = 1;
    for (size_t len = 1; len <= 64 && i + 2 * len <= n; ++len) {
      size_t repeat = 1;
      while (i + (repeat + 1) * len <= n && same(i, i + repeat * len, len)) {
        ++repeat;
      }
      if (repeat >= 2 && len * repeat > best_len * best_repeat) {
        best_len = len;
        best_repeat = repeat;
      }
    }
    if (best_len == 0 || best_repeat > 100000) {
      out.push_back(std::move(layers[i]));
      ++i;
      continue;
    }
    Layer block;
    std::vector<std::string> names;
    for (size_t k = 0; k < best_len; ++k) names.push_back(layers[i + k].name());
    std::string name = CommonPrefix(names);
    while (!name.empty() &&
           (std::isdigit(static_cast<unsigned char>(name.back())) ||
            name.back() == '.' || name.back() == '/' || name.back() == '_')) {
      name.pop_back();
    }
    block.set_name(name.empty() ? "block" : name);
    block.set_repeat(static_cast<uint32_t>(best_repeat));
    for (size_t k = 0; k < best_len; ++k) {
      *block.mutable_block()->add_layers() = std::move(layers[i + k]);
    }
    out.push_back(std::move(block));
    i += best_len * best_repeat;
  }
  return out;
}

}  // namespace onnx_internal
}  // namespace headroom
