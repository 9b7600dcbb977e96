#ifndef HEADROOM_CORE_FRONTENDS_ONNX_SMALL_TENSORS_H_
#define HEADROOM_CORE_FRONTENDS_ONNX_SMALL_TENSORS_H_

// Shape inference's evaluator of small tensors (onnx_shapes.cc). Not part
// of the front-end's interface.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace headroom {
namespace onnx_internal {

// The values of a small tensor: a shape, or arithmetic on shapes
// (Shape -> Gather -> Div -> Concat -> Reshape, as exports with dynamic
// axes compute head sizes). With the batch and lengths bound, all of it is
// known; ONNX 1.12 propagates only part of it, so it is evaluated here.
struct SmallTensor {
  int32_t type = 0;
  std::vector<int64_t> dims;
  std::vector<double> values;
};

// The values of a constant tensor of an integer, bool, float or double type
// and at most 64 elements, from its typed fields or raw data; nullopt for
// another tensor.
std::optional<SmallTensor> ReadSmallTensor(const onnx::TensorProto& t);

// Writes `s` into `t` as a tensor named `name`, in its type's typed field.
void WriteSmallTensor(const SmallTensor& s, const std::string& name,
                      onnx::TensorProto* t);

// The values of node n's first output, when its inputs' values are known
// and it is one of the ops shapes are computed with (Shape, Identity, Cast,
// Reshape and the like, Gather, Concat, Slice, arithmetic); `in` holds each
// input's values or nullptr, `input_types` their inferred types,
// `output_type` the output's (it must be fully known and small). nullopt
// otherwise.
std::optional<SmallTensor> EvaluateSmallTensor(
    const onnx::NodeProto& n, const std::vector<const SmallTensor*>& in,
    const std::vector<const onnx::TypeProto*>& input_types,
    const onnx::TypeProto* output_type);

}  // namespace onnx_internal
}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_ONNX_SMALL_TENSORS_H_
