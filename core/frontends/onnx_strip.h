#ifndef HEADROOM_CORE_FRONTENDS_ONNX_STRIP_H_
#define HEADROOM_CORE_FRONTENDS_ONNX_STRIP_H_

// Weights out of an ONNX model. The planner reads an ONNX graph's shapes,
// never its weight values, so a model file of gigabytes can travel as a few
// kilobytes: its serialized ModelProto is copied field by field, on the wire
// format, with the data of every large tensor left out. The input is read
// once, in order; only what is kept is held in memory.

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/io/zero_copy_stream.h"

namespace headroom {

// A TensorProto serialized larger than this loses its data (weights); the
// small ones (shape constants a Reshape reads, scalars) keep theirs.
inline constexpr size_t kStripTensorBytes = 4096;

// Largest ONNX file accepted: protobuf cannot hold a message of 2 GiB or
// more (bigger models keep their weights in external data files, which the
// planner does not need).
inline constexpr size_t kMaxOnnxFileBytes = (size_t{2} << 30) - 1;

// Copies the ModelProto read from `input`, leaving out the data fields
// (float_data, int32_data, string_data, int64_data, raw_data, double_data,
// uint64_data) of every tensor serialized larger than kStripTensorBytes:
// graph initializers, Constant node values, sparse tensors, and the same in
// subgraphs, functions and training graphs. Dims, data types, names and
// every other field are kept. INVALID_ARGUMENT when the bytes are not a
// well-formed protobuf message (truncated, or another format), nest deeper
// than 64 messages, or would copy to more than `max_output_bytes`.
absl::StatusOr<std::string> StripOnnxWeights(
    google::protobuf::io::ZeroCopyInputStream* input, size_t max_output_bytes);

}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_ONNX_STRIP_H_
