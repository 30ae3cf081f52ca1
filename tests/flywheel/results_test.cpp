#include "flywheel/results.h"

#include <gtest/gtest.h>

TEST(Results, HeaderNamesEveryColumn) {
  EXPECT_EQ(megasched::flywheel::results_columns().size(), 21u);
}
