// tests/unit/smoke_test.cpp -- the first end-to-end checks of the eager runtime.
#include <gtest/gtest.h>

#include <kiln/kiln.h>

using namespace kiln;

TEST(Smoke, AddsTwoTensors) {
  Tensor a = tensor({1, 2, 3}), b = tensor({10, 20, 30});
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ((a * 0.5f).to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
}
