#include "base/value_bounds.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace headroom {

ValueBound CardPeakBound(double card_gb) {
  return ValueBound{0, card_gb * kCardPeakSlack, false, "GB"};
}

absl::Status CheckBound(double value, absl::string_view field,
                        const ValueBound& bound) {
  const bool low_ok = bound.min_open ? value > bound.min : value >= bound.min;
  if (low_ok && std::isfinite(value) && value <= bound.max) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = ", value, " is out of range; allowed ",
                   bound.min_open ? "(" : "[", bound.min, ", ", bound.max, "]",
                   bound.unit.empty() ? "" : " ", bound.unit));
}

absl::Status CheckCountRange(uint64_t value, absl::string_view field,
                             uint64_t min, uint64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " = ", value, " is out of range; allowed ", min, "..", max));
}

absl::Status CheckMeanPower(double energy_j, uint64_t steps,
                            double step_seconds, uint32_t gpus,
                            absl::string_view field) {
  if (steps == 0 || !(step_seconds > 0)) return absl::OkStatus();
  const double seconds = static_cast<double>(steps) * step_seconds *
                         static_cast<double>(gpus == 0 ? 1 : gpus);
  const double watts = energy_j / seconds;
  if (watts <= kMaxCardWatts * kPowerSlack) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " = ", energy_j, " J over ", steps, " steps of ", step_seconds,
      " s on ", gpus == 0 ? 1 : gpus, " GPU(s) is a mean ", watts,
      " W per GPU; allowed up to ", kMaxCardWatts, " W (no card draws more)"));
}

}  // namespace headroom
