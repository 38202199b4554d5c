#include <gtest/gtest.h>
#include "autograd/ops.h"
using namespace attnlab;
TEST(Smoke, Add) { Tensor a = Tensor::ones({2}); EXPECT_EQ((a + a).values()[0], 2.0); }
