#ifndef HEADROOM_CORE_FRONTENDS_ONNX_SHAPES_H_
#define HEADROOM_CORE_FRONTENDS_ONNX_SHAPES_H_

// Shape inference for untrusted ONNX graphs. ONNX 1.12's inference
// functions assume a well-formed graph; on a malformed one some read past a
// list or divide by zero (mutating valid graphs finds them: an undefined
// input, a stride of 0, a ConvTranspose weight of lower rank than its
// input). These functions check what inference assumes first, then run it
// one node at a time.

#include <string>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace headroom {

// "node 'NAME' (OP)" for messages; the first output, or "#index", when the
// node has no name.
std::string OnnxNodeLabel(const onnx::NodeProto& node, int index);

// The version of the default-domain opset the model imports (0 if none).
int OnnxDefaultOpset(const onnx::ModelProto& model);

// Whether the node is an operator of the default domain that `opset` defines:
// one whose input and output counts CheckOnnxStructure verified. Others
// (another domain's, or newer than the opset) are opaque to the importer.
bool IsStandardOnnxOp(const onnx::NodeProto& node, int opset);

// Checks what shape inference assumes of a graph: at most 64 axes per graph
// input and initializer, initializer dims in 0..2^32 (2^50 elements at
// most); every node has an output, reads only values defined before it,
// writes values no other node writes, holds no subgraph (control flow is not
// supported), fits its operator's schema (input and output counts, attribute
// types) and has integer attributes in range (strides, dilations, kernels,
// groups, block sizes at least 1; at most 1,024 values in a list).
// INVALID_ARGUMENT naming the node or initializer otherwise.
absl::Status CheckOnnxStructure(const onnx::ModelProto& model);

// Infers every value's type and shape, replacing the graph's value_info with
// them. ONNX's inference and data-propagation functions run node by node
// for the operators of training graphs (an allow-list), and only when the
// node's input ranks and attributes fit what each function assumes; other
// outputs stay unknown. The graph must have passed CheckOnnxStructure.
// INVALID_ARGUMENT naming the node when inference finds the graph
// inconsistent (mismatched shapes) or a node cannot be right whatever the
// shapes (a weight of the wrong rank, an axis out of range).
absl::Status InferOnnxShapes(onnx::ModelProto* model);

}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_ONNX_SHAPES_H_
