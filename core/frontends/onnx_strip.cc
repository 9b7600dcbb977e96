#include "core/frontends/onnx_strip.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/io/coded_stream.h"

namespace headroom {
namespace {

using google::protobuf::io::CodedInputStream;

// The ONNX messages (onnx.proto, IR version 8) that can hold tensors.
enum class Message {
  kModel,
  kGraph,
  kNode,
  kAttribute,
  kTensor,
  kSparseTensor,
  kFunction,
  kTrainingInfo,
};

constexpr int kMaxDepth = 64;

// The message a length-delimited field holds, when it can hold tensors;
// anything else is copied as bytes.
std::optional<Message> Child(Message parent, uint32_t field) {
  switch (parent) {
    case Message::kModel:
      if (field == 7) return Message::kGraph;          // graph
      if (field == 20) return Message::kTrainingInfo;  // training_info
      if (field == 25) return Message::kFunction;      // functions
      break;
    case Message::kGraph:
      if (field == 1) return Message::kNode;           // node
      if (field == 5) return Message::kTensor;         // initializer
      if (field == 15) return Message::kSparseTensor;  // sparse_initializer
      break;
    case Message::kNode:
      if (field == 5) return Message::kAttribute;  // attribute
      break;
    case Message::kAttribute:
      if (field == 5 || field == 10) return Message::kTensor;  // t, tensors
      if (field == 6 || field == 11) return Message::kGraph;   // g, graphs
      if (field == 22 || field == 23) return Message::kSparseTensor;
      break;
    case Message::kSparseTensor:
      if (field == 1 || field == 2) return Message::kTensor;  // values, indices
      break;
    case Message::kFunction:
      if (field == 7) return Message::kNode;  // node
      break;
    case Message::kTrainingInfo:
      if (field == 1 || field == 2) return Message::kGraph;
      break;
    case Message::kTensor:
      break;
  }
  return std::nullopt;
}

// TensorProto fields that hold the values: float_data, int32_data,
// string_data, int64_data, raw_data, double_data, uint64_data.
bool IsTensorData(uint32_t field) {
  return (field >= 4 && field <= 7) || (field >= 9 && field <= 11);
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("not an ONNX model: the bytes are not a well-formed "
                   "protobuf message (",
                   what, "; truncated, or another format)"));
}

class Stripper {
 public:
  Stripper(CodedInputStream* in, size_t max_output_bytes)
      : in_(in), max_output_bytes_(max_output_bytes) {}

  // Copies fields until the current limit (or the end of the input).
  absl::Status Copy(Message kind, bool drop_data, int depth, std::string* out) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ONNX model nests messages deeper than ", kMaxDepth, " levels"));
    }
    while (true) {
      const uint32_t tag = in_->ReadTag();
      if (tag == 0) {
        if (!in_->ConsumedEntireMessage()) return Malformed("invalid tag");
        return absl::OkStatus();
      }
      const uint32_t field = tag >> 3;
      const int wire_type = static_cast<int>(tag & 7);
      if (field == 0) return Malformed("field number 0");
      const bool drop = drop_data && IsTensorData(field);
      switch (wire_type) {
        case 0: {  // varint
          uint64_t value = 0;
          if (!in_->ReadVarint64(&value)) return Malformed("cut varint");
          if (!drop) {
            AppendVarint(tag, out);
            AppendVarint(value, out);
          }
          break;
        }
        case 1: {  // fixed64
          uint64_t value = 0;
          if (!in_->ReadLittleEndian64(&value)) return Malformed("cut fixed64");
          if (!drop) {
            AppendVarint(tag, out);
            for (int i = 0; i < 8; ++i) {
              out->push_back(static_cast<char>(value >> (8 * i)));
            }
          }
          break;
        }
        case 5: {  // fixed32
          uint32_t value = 0;
          if (!in_->ReadLittleEndian32(&value)) return Malformed("cut fixed32");
          if (!drop) {
            AppendVarint(tag, out);
            for (int i = 0; i < 4; ++i) {
              out->push_back(static_cast<char>(value >> (8 * i)));
            }
          }
          break;
        }
        case 2: {  // length-delimited
          uint32_t length = 0;
          if (!in_->ReadVarint32(&length)) return Malformed("cut length");
          if (length > static_cast<uint32_t>(kMaxOnnxFileBytes)) {
            return Malformed("field longer than 2 GiB");
          }
          if (drop) {
            if (!in_->Skip(static_cast<int>(length))) {
              return Malformed("field longer than the input");
            }
            break;
          }
          std::string nested;
          if (const std::optional<Message> child = Child(kind, field)) {
            const CodedInputStream::Limit limit =
                in_->PushLimit(static_cast<int>(length));
            const bool drop_child =
                *child == Message::kTensor && length > kStripTensorBytes;
            RETURN_IF_ERROR(Copy(*child, drop_child, depth + 1, &nested));
            if (in_->BytesUntilLimit() != 0) {
              return Malformed("message longer than the input");
            }
            in_->PopLimit(limit);
          } else {
            RETURN_IF_ERROR(CheckRoom(out->size() + length));
            if (!in_->ReadString(&nested, static_cast<int>(length))) {
              return Malformed("field longer than the input");
            }
          }
          AppendVarint(tag, out);
          AppendVarint(nested.size(), out);
          out->append(nested);
          break;
        }
        default:
          return Malformed(absl::StrCat("wire type ", wire_type).c_str());
      }
      RETURN_IF_ERROR(CheckRoom(out->size()));
    }
  }

 private:
  absl::Status CheckRoom(size_t bytes) const {
    if (bytes <= max_output_bytes_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "ONNX model is larger than ", max_output_bytes_,
        " bytes even without its weights; the planner accepts graphs up to "
        "that size"));
  }

  CodedInputStream* in_;
  size_t max_output_bytes_;
};

}  // namespace

absl::StatusOr<std::string> StripOnnxWeights(
    google::protobuf::io::ZeroCopyInputStream* input, size_t max_output_bytes) {
  CodedInputStream in(input);
  std::string out;
  Stripper stripper(&in, max_output_bytes);
  RETURN_IF_ERROR(stripper.Copy(Message::kModel, false, 0, &out));
  return out;
}

}  // namespace headroom
