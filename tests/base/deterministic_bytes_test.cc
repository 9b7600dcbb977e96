#include "base/deterministic_bytes.h"

#include "gtest/gtest.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {
namespace {

// Map entries inserted in different orders give the same bytes: cache and
// model keys made of these bytes do not depend on insertion order.
TEST(DeterministicBytesTest, MapOrderDoesNotChangeTheBytes) {
  v1::AnchoredBound a;
  v1::AnchoredBound b;
  const char* gpus[] = {"L4", "H100", "A100-80GB", "T4", "H200"};
  for (int i = 0; i < 5; ++i) {
    (*a.mutable_gpu_constant_gb())[gpus[i]] = 0.1 * i;
    (*b.mutable_gpu_constant_gb())[gpus[4 - i]] = 0.1 * (4 - i);
  }
  EXPECT_EQ(DeterministicBytes(a), DeterministicBytes(b));
}

TEST(DeterministicBytesTest, DifferentMessagesGiveDifferentBytes) {
  v1::AnchoredBound a;
  v1::AnchoredBound b;
  (*a.mutable_gpu_constant_gb())["L4"] = 0.5;
  (*b.mutable_gpu_constant_gb())["L4"] = 0.25;
  EXPECT_NE(DeterministicBytes(a), DeterministicBytes(b));
  EXPECT_EQ(DeterministicBytes(v1::AnchoredBound()), "");
}

}  // namespace
}  // namespace headroom
