// Tests of KernelCheck (kernel_check.h): "the kernels run" is remembered per
// GPU; a refusal, whatever its cause, is asked again at the next call, so a
// passing failure (memory, a sticky error) never becomes a lasting refusal.
#include "core/gpu/kernel_check.h"

#include <gtest/gtest.h>

#include <string>

namespace gearjax {
namespace {

TEST(KernelCheck, AFailedCheckIsReportedAsItselfAndAskedAgain) {
  KernelCheck check;
  int asked = 0;
  auto out_of_memory = [&](int) {
    ++asked;
    return std::string("checking gearjax's CUDA kernels on GPU 0 failed: out of memory");
  };
  EXPECT_EQ(check.Check(0, out_of_memory),
            "checking gearjax's CUDA kernels on GPU 0 failed: out of memory");
  EXPECT_FALSE(check.KnownToRun(0));
  auto runs = [&](int) {
    ++asked;
    return std::string();
  };
  EXPECT_EQ(check.Check(0, runs), "");  // asked again: memory was freed meanwhile
  EXPECT_TRUE(check.KnownToRun(0));
  EXPECT_EQ(check.Check(0, out_of_memory), "");  // remembered: not asked
  EXPECT_EQ(asked, 2);
}

TEST(KernelCheck, EachGpuIsCheckedOnItsOwn) {
  KernelCheck check;
  auto no_image_on_3 = [](int device) {
    return device == 3 ? std::string("no kernels for GPU 3") : std::string();
  };
  EXPECT_EQ(check.Check(3, no_image_on_3), "no kernels for GPU 3");
  EXPECT_EQ(check.Check(2, no_image_on_3), "");
  EXPECT_FALSE(check.KnownToRun(3));
  EXPECT_TRUE(check.KnownToRun(2));
  EXPECT_EQ(check.Check(3, no_image_on_3), "no kernels for GPU 3");
}

TEST(KernelCheck, GpusPastTheTableAreAskedEveryTime) {
  KernelCheck check;
  int asked = 0;
  auto runs = [&](int) {
    ++asked;
    return std::string();
  };
  EXPECT_EQ(check.Check(64, runs), "");
  EXPECT_EQ(check.Check(64, runs), "");
  EXPECT_EQ(check.Check(-1, runs), "");
  EXPECT_EQ(asked, 3);
}

}  // namespace
}  // namespace gearjax
