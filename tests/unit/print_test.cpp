// tests/unit/print_test.cpp -- operator<< reproduces PyTorch's layout (torch/_tensor_str.py:
// precision 4, threshold 1000, edgeitems 3, linewidth 80); dtypes other than f32, i64 and bool
// are named in kiln's spelling.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "tests/unit/test_util.h"

using namespace kiln;

namespace {
std::string show(const Tensor& t) {
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), t.str());
  return os.str();
}
}  // namespace

TEST(Print, WholeFloatsPrintWithATrailingPoint) {
  EXPECT_EQ(show(tensor({1, 2, 3})), "tensor([1., 2., 3.])");
  EXPECT_EQ(show(tensor({-1, 20})), "tensor([-1., 20.])");
  EXPECT_EQ(show(zeros({2})), "tensor([0., 0.])");
}

TEST(Print, FractionsUseFourDecimalsAndAlignColumns) {
  EXPECT_EQ(show(from_vector<float>({1.5f, 2, 3, 4}, {2, 2})),
            "tensor([[1.5000, 2.0000],\n"
            "        [3.0000, 4.0000]])");
  EXPECT_EQ(show(from_vector<float>({-0.5f, 12.25f})), "tensor([-0.5000, 12.2500])");
  EXPECT_EQ(show(from_vector<float>({0.1f, -3})), "tensor([ 0.1000, -3.0000])");
}

TEST(Print, IntegersAndBoolsArePaddedToTheWidestValue) {
  EXPECT_EQ(show(from_vector<int64_t>({1, 20, 300})), "tensor([  1,  20, 300])");
  EXPECT_EQ(show(from_vector<int64_t>({-5, 3})), "tensor([-5,  3])");
  EXPECT_EQ(show(from_vector<int32_t>({1, 2})), "tensor([1, 2], dtype=i32)");
  EXPECT_EQ(show(from_vector<uint8_t>({7})), "tensor([7], dtype=u8)");
  EXPECT_EQ(show(from_vector<bool>({true, false})), "tensor([ True, False])");
  EXPECT_EQ(show(from_vector<bool>({true, true})), "tensor([True, True])");
}

TEST(Print, NonDefaultDtypesAreNamed) {
  EXPECT_EQ(show(from_vector<double>({0.5, -1.25})), "tensor([ 0.5000, -1.2500], dtype=f64)");
  EXPECT_EQ(show(full({2}, 1.5, f16)), "tensor([1.5000, 1.5000], dtype=f16)");
  EXPECT_EQ(show(full({1}, 2, bf16)), "tensor([2.], dtype=bf16)");
}

TEST(Print, ZeroDimTensorsPrintTheBareValue) {
  EXPECT_EQ(show(scalar_tensor(3.5)), "tensor(3.5000)");
  EXPECT_EQ(show(scalar_tensor(2.0)), "tensor(2.)");
  EXPECT_EQ(show(scalar_tensor(7)), "tensor(7)");
  EXPECT_EQ(show(scalar_tensor(true)), "tensor(True)");
  EXPECT_EQ(show(scalar_tensor(0.25, f64)), "tensor(0.2500, dtype=f64)");
}

TEST(Print, WideRangesSwitchToScientificNotation) {
  EXPECT_EQ(show(from_vector<float>({1e-5f, 1})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(show(from_vector<float>({1e9f, 1})), "tensor([1.0000e+09, 1.0000e+00])");
  EXPECT_EQ(show(from_vector<float>({-1e-5f, 1})), "tensor([-1.0000e-05,  1.0000e+00])");
  EXPECT_EQ(show(from_vector<float>({1000, 1})), "tensor([1000.,    1.])");  // ratio 1000: not wide
}

TEST(Print, NonFiniteValuesDoNotWidenColumns) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(show(from_vector<float>({std::nanf(""), 1.5f})), "tensor([   nan, 1.5000])");
  EXPECT_EQ(show(from_vector<float>({-inf, 1})), "tensor([-inf, 1.])");
  EXPECT_EQ(show(from_vector<float>({inf, 2, std::nanf("")})), "tensor([inf, 2., nan])");
  EXPECT_EQ(show(from_vector<float>({std::nanf(""), inf})), "tensor([nan, inf])");
}

TEST(Print, NestedDimsAreSeparatedByBlankLines) {
  EXPECT_EQ(show(arange(8).reshape({2, 2, 2})),
            "tensor([[[0, 1],\n"
            "         [2, 3]],\n"
            "\n"
            "        [[4, 5],\n"
            "         [6, 7]]])");
  EXPECT_EQ(show(arange(6).reshape({3, 2}).t()),  // printed in logical order
            "tensor([[0, 2, 4],\n"
            "        [1, 3, 5]])");
}

TEST(Print, EmptyTensorsPrintEmptyBrackets) {
  EXPECT_EQ(show(zeros({0})), "tensor([])");
  EXPECT_EQ(show(zeros({0}, i32)), "tensor([], dtype=i32)");
  EXPECT_EQ(show(zeros({2, 0})), "tensor([], size=[2,0])");
}

TEST(Print, LongRowsWrapAtEightyColumns) {
  EXPECT_EQ(show(arange(20.0)),
            "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "        14., 15., 16., 17., 18., 19.])");
  EXPECT_EQ(show(arange(40.0).reshape({2, 20})),
            "tensor([[ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "         14., 15., 16., 17., 18., 19.],\n"
            "        [20., 21., 22., 23., 24., 25., 26., 27., 28., 29., 30., 31., 32., 33.,\n"
            "         34., 35., 36., 37., 38., 39.]])");
}

TEST(Print, LargeTensorsAreSummarizedAtTheirEdges) {
  EXPECT_EQ(show(zeros({1001})), "tensor([0., 0., 0.,  ..., 0., 0., 0.])");
  EXPECT_EQ(show(zeros({1000})).find("..."), std::string::npos);  // 1000 is not above the limit
  EXPECT_EQ(show(arange(1200).reshape({40, 30})),
            "tensor([[   0,    1,    2,  ...,   27,   28,   29],\n"
            "        [  30,   31,   32,  ...,   57,   58,   59],\n"
            "        [  60,   61,   62,  ...,   87,   88,   89],\n"
            "        ...,\n"
            "        [1110, 1111, 1112,  ..., 1137, 1138, 1139],\n"
            "        [1140, 1141, 1142,  ..., 1167, 1168, 1169],\n"
            "        [1170, 1171, 1172,  ..., 1197, 1198, 1199]])");
  // Only the values shown decide the format: a hidden wide value changes nothing.
  Tensor z = zeros({2000});
  z.data<float>()[1000] = 123456.5f;
  EXPECT_EQ(show(z), "tensor([0., 0., 0.,  ..., 0., 0., 0.])");
  // Seven items of ten characters do not fit in one line.
  EXPECT_EQ(show(arange(2000.0)),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
            "        1.9990e+03])");
}

TEST(Print, UndefinedTensorsSaySo) { EXPECT_EQ(show(Tensor()), "tensor(undefined)"); }
