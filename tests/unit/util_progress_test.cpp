// Progress (util/progress.h) off a terminal, as under ctest: updates come at most every few
// seconds (the interval), the last item at once only to complete a bar already shown; finish()
// always prints its "done" line, finish(false) only after something was shown (a load too short
// to draw a bar, the CUDA load of an 8B model included, stays silent).
#include <gtest/gtest.h>

#include <string>

#include "util/progress.h"

TEST(Progress, FinishWithoutShowingStaysSilentOnlyWhenAsked) {
  testing::internal::CaptureStderr();
  {
    lmf::Progress p("quick", 100);
    p.update(50, 1, 2);  // within the first seconds and not the last item: not shown
    p.finish(false);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  testing::internal::CaptureStderr();
  {
    lmf::Progress p("always", 100);
    p.update(50, 1, 2);
    p.finish();
  }
  const std::string always = testing::internal::GetCapturedStderr();
  EXPECT_NE(always.find("always: done in"), std::string::npos) << always;

  testing::internal::CaptureStderr();
  {
    lmf::Progress p("instant", 100);
    p.update(100, 2, 2);  // the last item of work shorter than the interval: nothing to finish
    p.finish(false);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");

  testing::internal::CaptureStderr();
  {
    lmf::Progress p("shown", 100, true, 0.0);  // every update is due
    p.update(50, 1, 2);
    p.update(100, 2, 2);
    p.finish(false);
  }
  const std::string shown = testing::internal::GetCapturedStderr();
  EXPECT_NE(shown.find("shown: 50% (1/2"), std::string::npos) << shown;
  EXPECT_NE(shown.find("shown: 100% (2/2"), std::string::npos) << shown;
  EXPECT_NE(shown.find("shown: done in"), std::string::npos) << shown;

}
