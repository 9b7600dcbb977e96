#ifndef HEADROOM_BASE_INPUT_LIMITS_H_
#define HEADROOM_BASE_INPUT_LIMITS_H_

// What one request may put in the store, and how an error message echoes a
// request's value. Every stored string is bounded here, once, so that a
// listing of stored things stays far under the 4 MiB response limit and no
// caller can make one fail for everyone by storing a huge value.

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace headroom {

// Names and ids: a GPU, model, template, worker, mode, dtype, version, a
// density run id ("arch|dtype|mode|lr=..."), a package version.
inline constexpr size_t kMaxNameChars = 256;

// Free text a request may store: notes, reasons, sources, framework
// descriptions, an excluded reason.
inline constexpr size_t kMaxTextChars = 4096;

// A probe request as stored (model source included: an inline spec, a
// Hugging Face config or an ONNX graph without weights; the GPT-2 graph
// torch exports is 222 KB).
inline constexpr size_t kMaxStoredProbeRequestBytes = 256 << 10;

// Most characters of a request's value an error message repeats.
inline constexpr size_t kMaxEchoChars = 200;

// `value` as an error message may repeat it: unchanged up to kMaxEchoChars,
// else its first kMaxEchoChars bytes (cut at a UTF-8 character boundary)
// followed by "…(N bytes)" with N the whole value's size.
std::string Echo(absl::string_view value);

// OK when `value` has at most `max_chars` bytes; otherwise INVALID_ARGUMENT
// naming `field`, the size and the limit.
absl::Status CheckLength(absl::string_view value, absl::string_view field,
                         size_t max_chars);

}  // namespace headroom

#endif  // HEADROOM_BASE_INPUT_LIMITS_H_
