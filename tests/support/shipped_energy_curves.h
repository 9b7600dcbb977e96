#ifndef HEADROOM_TESTS_SUPPORT_SHIPPED_ENERGY_CURVES_H_
#define HEADROOM_TESTS_SUPPORT_SHIPPED_ENERGY_CURVES_H_

// The shipped energy curves (data/energy-curves.json), read once.

#include <string>

#include "core/energy/energy_curves.h"
#include "gtest/gtest.h"
#include "headroom/v1/energy.pb.h"
#include "io/files.h"

namespace headroom::testing {

inline const v1::EnergyCurveSet& ShippedEnergyCurves() {
  static const v1::EnergyCurveSet* set = [] {
    absl::StatusOr<std::string> text =
        ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/data/energy-curves.json");
    EXPECT_TRUE(text.ok()) << text.status();
    absl::StatusOr<v1::EnergyCurveSet> parsed =
        ParseCurveSet(text.ok() ? *text : "", "energy-curves.json");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return new v1::EnergyCurveSet(parsed.ok() ? *parsed : v1::EnergyCurveSet());
  }();
  return *set;
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_SHIPPED_ENERGY_CURVES_H_
