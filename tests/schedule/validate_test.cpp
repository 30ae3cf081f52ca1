#include "schedule/validate.h"
#include <gtest/gtest.h>
TEST(ScheduleValidator, Placeholder) { EXPECT_TRUE(true); }
