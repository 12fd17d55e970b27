// The op profile (ops/op_profile.h): off, ops record nothing; on, each outermost op adds its
// time, one call and its work to its class; an op inside another counts under the outer one.
#include "ops/op_profile.h"

#include <gtest/gtest.h>

#include "ops/ops.h"
#include "tests/testing.h"

namespace vitpe {
namespace {

constexpr int idx(OpClass c) { return static_cast<int>(c); }

TEST(OpProfile, OffRecordsNothingOnCountsOutermostOps) {
  Tensor x = testing::random_tensor(Shape{4, 16}, 1), w = testing::random_tensor(Shape{8, 16}, 2);
  Tensor y = Tensor::empty(Shape{4, 8}), g = Tensor::empty(Shape{4, 8});
  op_profile_enable(false);
  op_profile_take();
  linear_forward(y, x, w, Tensor());
  OpTotals t = op_profile_take();
  for (int c = 0; c < idx(OpClass::count); ++c) EXPECT_EQ(t.calls[c], 0) << c;

  op_profile_enable(true);
  linear_forward(y, x, w, Tensor());
  linear_forward(y, x, w, Tensor());
  gelu_forward(g, y);
  {
    const OpScope outer(OpClass::attention, 10.0);
    gelu_forward(g, y);  // inside another op: counted under the outer one only
  }
  t = op_profile_take();
  op_profile_enable(false);
  EXPECT_EQ(t.calls[idx(OpClass::linear)], 2);
  EXPECT_DOUBLE_EQ(t.flops[idx(OpClass::linear)], 2 * 2.0 * 4 * 16 * 8);
  EXPECT_GT(t.seconds[idx(OpClass::linear)], 0);
  EXPECT_EQ(t.calls[idx(OpClass::gelu)], 1);
  EXPECT_EQ(t.calls[idx(OpClass::attention)], 1);
  EXPECT_DOUBLE_EQ(t.flops[idx(OpClass::attention)], 10.0);
  // Taking clears.
  t = op_profile_take();
  EXPECT_EQ(t.calls[idx(OpClass::linear)], 0);
  EXPECT_STREQ(op_class_name(OpClass::copies), "copies");
}

}  // namespace
}  // namespace vitpe
