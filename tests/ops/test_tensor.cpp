// Tensor: shapes, views sharing storage, reshape with -1, slice bounds, bf16 conversion and
// the messages of the shape checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ops/tensor.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

TEST(Shape, DimNumelAndString) {
  Shape s{2, 197, 384};
  EXPECT_EQ(s.size(), 3);
  EXPECT_EQ(s.numel(), 2 * 197 * 384);
  EXPECT_EQ(s.dim(-1), 384);
  EXPECT_EQ(s.dim(0), 2);
  EXPECT_EQ(s.str(), "[2, 197, 384]");
  EXPECT_THROW(s.dim(3), ShapeError);
  EXPECT_THROW(s.dim(-4), ShapeError);
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar holds one element
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7}), ShapeError);
}

// A shape whose element count overflows int64 (once signed-overflow UB) is a ShapeError.
TEST(Shape, NumelOverflowIsAnError) {
  const Shape s{int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_THROW(s.numel(), ShapeError);
  EXPECT_THROW(Tensor::empty(s), ShapeError);
  EXPECT_EQ(Shape({int64_t{1} << 31, int64_t{1} << 31}).numel(), int64_t{1} << 62);
}

TEST(Shape, WithLastReplacesTheLastDimension) {
  EXPECT_EQ(Shape({2, 3, 4}).with_last(7), Shape({2, 3, 7}));
  EXPECT_EQ(Shape({5}).with_last(1), Shape({1}));
}

// at() checks its index as std::vector::at does, and says which index and which tensor.
TEST(Tensor, AtChecksTheIndex) {
  Tensor t = Tensor::full({2, 3}, 1.5f);
  EXPECT_EQ(t.at(5), 1.5f);
  t.at(0) = 2.0f;
  EXPECT_EQ(static_cast<const Tensor&>(t).at(0), 2.0f);
  try {
    t.at(6);
    ADD_FAILURE() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("index 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.at(-1), std::out_of_range);
}

TEST(Tensor, FromZerosFullAndClone) {
  Tensor t = Tensor::from(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.at(4), 5.0f);
  Tensor z = Tensor::zeros(Shape{5});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(z.at(i), 0.0f);
  Tensor f = Tensor::full(Shape{3}, 2.5f);
  EXPECT_EQ(f.at(2), 2.5f);
  Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage(t));
  c.at(0) = 42;
  EXPECT_EQ(t.at(0), 1.0f);
  EXPECT_THROW(Tensor::from(Shape{2, 2}, {1, 2, 3}), ShapeError);
  EXPECT_THROW(Tensor::empty(Shape{2, -1}), ShapeError);
}

TEST(Tensor, StorageIsAligned) {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::empty(Shape{n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << n;
  }
}

TEST(Tensor, SliceIsAViewOfTheLeadingDimension) {
  Tensor t = Tensor::from(Shape{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_TRUE(s.shares_storage(t));
  EXPECT_EQ(s.at(0), 2.0f);
  EXPECT_EQ(s.at(3), 5.0f);
  s.at(0) = -1;  // writes through to the parent
  EXPECT_EQ(t.at(2), -1.0f);
  // A slice of a slice keeps counting from its own start.
  Tensor ss = s.slice(1, 2);
  EXPECT_EQ(ss.at(0), 4.0f);
  EXPECT_EQ(t.slice(4, 4).numel(), 0);
}

TEST(Tensor, SliceBoundsErrorsNameTheRangeAndShape) {
  Tensor t = Tensor::zeros(Shape{4, 2});
  EXPECT_THROW(t.slice(-1, 2), ShapeError);
  EXPECT_THROW(t.slice(3, 2), ShapeError);
  try {
    t.slice(2, 5);
    FAIL() << "slice past the end did not throw";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2, 5)"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 2]"), std::string::npos) << m;
  }
}

TEST(Tensor, ReshapeInfersMinusOneAndSharesStorage) {
  Tensor t = testing::random_tensor(Shape{2, 3, 4}, 1);
  Tensor r = t.reshape(Shape{-1, 4});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_TRUE(r.shares_storage(t));
  EXPECT_EQ(r.at(23), t.at(23));
  EXPECT_EQ(t.reshape(Shape{2, -1}).shape(), (Shape{2, 12}));
  EXPECT_EQ(t.reshape(Shape{24}).shape(), (Shape{24}));
  EXPECT_THROW(t.reshape(Shape{5, -1}), ShapeError);  // 24 is not a multiple of 5
  EXPECT_THROW(t.reshape(Shape{-1, -1}), ShapeError);
  EXPECT_THROW(t.reshape(Shape{5, 5}), ShapeError);
  // A reshape of a slice views the slice's elements.
  Tensor s = t.slice(1, 2).reshape(Shape{12});
  EXPECT_EQ(s.at(0), t.at(12));
}

TEST(Tensor, Bf16RoundTripIsExactForBf16ValuesAndRoundsToNearestEven) {
  // Values with at most 8 significant bits survive f32 -> bf16 -> f32 exactly.
  Tensor t = Tensor::from(Shape{6}, {1.0f, -2.5f, 0.0f, 3.140625f, 1e30f, -1.5e-20f});
  // 1e30 and 1.5e-20 are not bf16 values: compare them to their own rounding below.
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.nbytes(), 12u);
  Tensor back = b.to(DType::f32);
  EXPECT_EQ(back.at(0), 1.0f);
  EXPECT_EQ(back.at(1), -2.5f);
  EXPECT_EQ(back.at(2), 0.0f);
  EXPECT_EQ(back.at(3), 3.140625f);
  for (int i = 4; i < 6; ++i) {
    EXPECT_LE(std::fabs(back.at(i) - t.at(i)), std::fabs(t.at(i)) * (1.0f / 256)) << i;
    EXPECT_EQ(back.at(i), bf16_to_float(float_to_bf16(t.at(i))));
  }
  // Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 -> 1 (even);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 -> 1 + 2^-6 (even).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 0x1.0p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * 0x1.0p-8f)), 1.0f + 0x1.0p-6f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // Typed access checks the dtype.
  EXPECT_THROW(b.f32(), std::invalid_argument);
  EXPECT_THROW(t.bf16(), std::invalid_argument);
}

TEST(Tensor, CopyFromAndZero) {
  Tensor a = testing::random_tensor(Shape{3, 5}, 7);
  Tensor b = Tensor::empty(Shape{15});
  b.copy_from(a);  // same numel, any shape
  for (int i = 0; i < 15; ++i) EXPECT_EQ(b.at(i), a.at(i));
  b.zero();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(b.at(i), 0.0f);
  EXPECT_THROW(b.copy_from(Tensor::empty(Shape{14})), ShapeError);
  EXPECT_THROW(b.copy_from(a.to(DType::bf16)), ShapeError);
}

TEST(Tensor, UndefinedTensorAccessThrows) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_THROW(u.raw(), std::logic_error);
  EXPECT_THROW(check_cpu_f32("op", "x", u), ShapeError);
}

TEST(Tensor, StorageAllocationCountCountsStorageNotViews) {
  int64_t before = storage_allocation_count();
  Tensor t = Tensor::empty(Shape{4, 4});
  EXPECT_EQ(storage_allocation_count(), before + 1);
  Tensor v = t.slice(1, 3).reshape(Shape{-1});
  Tensor copy = t;
  EXPECT_EQ(storage_allocation_count(), before + 1);
  Tensor c = t.clone();
  EXPECT_EQ(storage_allocation_count(), before + 2);
}

TEST(CheckShape, MessageNamesTheOpTheTensorAndBothShapes) {
  Tensor t = Tensor::zeros(Shape{2, 3});
  EXPECT_NO_THROW(check_shape("my_op", "y", t, Shape{2, 3}));
  try {
    check_shape("my_op", "y", t, Shape{2, 4});
    FAIL() << "check_shape accepted a wrong shape";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("my_op"), std::string::npos) << m;
    EXPECT_NE(m.find("y"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 4]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  try {
    check_shape("other_op", "w", Tensor(), Shape{1});
    FAIL() << "check_shape accepted an undefined tensor";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("other_op"), std::string::npos) << m;
    EXPECT_NE(m.find("undefined"), std::string::npos) << m;
  }
  // check_cpu_f32 names the found dtype.
  try {
    check_cpu_f32("op3", "x", t.to(DType::bf16));
    FAIL() << "check_cpu_f32 accepted bf16";
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("op3"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace vitpe
