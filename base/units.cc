#include "base/units.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace headroom {
namespace {

// 10^decimals, exact for 0..9.
double Scale(int decimals) {
  double scale = 1;
  for (int i = 0; i < std::clamp(decimals, 0, 9); ++i) scale *= 10;
  return scale;
}

}  // namespace

std::string FormatGb(double gb, int decimals) {
  return absl::StrFormat("%.*f GB", std::clamp(decimals, 0, 9), gb);
}

std::string FormatBytesAsGb(double bytes, int decimals) {
  // Divided by bytes per step (1e7 at two decimals), not by kBytesPerGb
  // then multiplied, so that a half-way value rounds as written.
  const double scale = Scale(decimals);
  return absl::StrCat(std::round(bytes / (kBytesPerGb / scale)) / scale, " GB");
}

}  // namespace headroom
