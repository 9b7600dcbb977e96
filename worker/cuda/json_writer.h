#ifndef HEADROOM_WORKER_CUDA_JSON_WRITER_H_
#define HEADROOM_WORKER_CUDA_JSON_WRITER_H_

// A small JSON writer for the probe's one output document, so that the probe
// builds on a GPU node with nothing but a compiler and the CUDA toolkit.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace headroom {
namespace cuda {

// Writes one JSON value, indented by two spaces. Calls must nest properly
// (Key before each member of an object); the writer does not check.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The name of the next object member.
  JsonWriter& Key(const std::string& name);
  JsonWriter& String(const std::string& value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  // Up to 6 significant digits; null when not finite (JSON has no NaN).
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // Double(*value) or null.
  JsonWriter& OptionalDouble(const std::optional<double>& value);
  JsonWriter& OptionalInt(const std::optional<int64_t>& value);

  // The document, with a trailing newline.
  std::string Finish() const { return out_ + "\n"; }

 private:
  // Separator and indentation before a value or a key.
  void BeforeValue();
  void Open(char bracket);
  void Close(char bracket);

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written yet
  bool after_key_ = false;
};

// `text` as a JSON string literal, quotes included.
std::string JsonQuote(const std::string& text);

}  // namespace cuda
}  // namespace headroom

#endif  // HEADROOM_WORKER_CUDA_JSON_WRITER_H_
