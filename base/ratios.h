#ifndef HEADROOM_BASE_RATIOS_H_
#define HEADROOM_BASE_RATIOS_H_

// Order statistics of measured figures and ratios, one definition for every
// page and bound that reports them.

#include <vector>

namespace headroom {

// The median (the mean of the middle two for an even count); 0 for none.
double Median(std::vector<double> values);

// k at `coverage` in (0, 1]: the sorted ratio at index ceil(coverage * (n -
// 1)), rounded up to 0.01 (an exact 1.17 stays 1.17). `ratios` must not be
// empty.
double RatioAtCoverage(std::vector<double> ratios, double coverage);

}  // namespace headroom

#endif  // HEADROOM_BASE_RATIOS_H_
