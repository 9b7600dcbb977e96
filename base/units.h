#ifndef HEADROOM_BASE_UNITS_H_
#define HEADROOM_BASE_UNITS_H_

// Sizes in words: GB means 10^9 bytes everywhere (GiB only where NVML or
// CUDA report binary units, converted at the edge). One formatter for every
// "12.3 GB" a message or page says.

#include <string>

namespace headroom {

inline constexpr double kBytesPerGb = 1e9;

// `bytes` in GB.
constexpr double BytesToGb(double bytes) { return bytes / kBytesPerGb; }

// "12.3 GB": `gb` with exactly `decimals` decimals (0..9), as printf's
// "%.*f" writes it ("12.30 GB" at 2).
std::string FormatGb(double gb, int decimals);

// "12.35 GB", "12.5 GB", "12 GB": `bytes` in GB rounded half away from zero
// to `decimals` decimals (0..9), trailing zeros dropped (as absl::StrCat
// writes a double: at most 6 significant digits), for assumptions that
// read as prose.
std::string FormatBytesAsGb(double bytes, int decimals);

}  // namespace headroom

#endif  // HEADROOM_BASE_UNITS_H_
