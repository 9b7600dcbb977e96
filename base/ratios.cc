#include "base/ratios.h"

#include <algorithm>
#include <cmath>

namespace headroom {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double RatioAtCoverage(std::vector<double> ratios, double coverage) {
  std::sort(ratios.begin(), ratios.end());
  const size_t index = static_cast<size_t>(
      std::ceil(coverage * static_cast<double>(ratios.size() - 1) - 1e-9));
  const double k = ratios[std::min(index, ratios.size() - 1)];
  // Round up to 0.01; the epsilon keeps an exact 1.17 from becoming 1.18.
  return std::ceil(k * 100.0 - 1e-9) / 100.0;
}

}  // namespace headroom
