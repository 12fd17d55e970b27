// Data-parallel training (vit/train/train.h) with 2 ranks against one process: run by ctest
// under `mpirun -np 2` (tests/CMakeLists.txt). Every rank trains the same tiny model alone and
// data-parallel and compares.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/testing.h"
#include "vit/io/checkpoint.h"
#include "vit/train/distributed.h"
#include "vit/train/train.h"

namespace vitpe {
namespace {

namespace fs = std::filesystem;

// MPI is started by the first world() and ended after the last test.
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_TRUE(launched_by_mpi()) << "run this suite under mpirun -np 2 (ctest does)";
    ASSERT_EQ(world().size(), 2) << "run this suite under mpirun -np 2 (ctest does)";
    set_num_threads(threads_for_this_rank());
  }
  void TearDown() override { finish_distributed(); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new MpiEnvironment);

// A small ViT on the procedural dataset at 16x16: 8 steps of 32 (2 epochs of 128 samples).
TrainOptions tiny_options() {
  TrainOptions o;
  o.model = "vit-fmnist";
  o.encoding = "relbias";
  o.overrides = {"depth=2", "dim=32", "heads=2", "mlp_dim=64"};
  o.data.name = "procedural";
  o.data.rows = o.data.cols = 16;
  o.data.limit = 128;
  o.test_limit = 50;  // not a multiple of the ranks' parts: the last batch splits unevenly
  o.eval_batch = 16;
  o.epochs = 2;
  o.batch = 32;
  o.lr = 2e-3;
  o.warmup_epochs = 0.5;
  o.progress = o.verbose = false;
  o.log_every = 0;
  return o;
}

// Both ranks' weights are the same bits: the gathered checksums at rank 0 agree.
void expect_ranks_agree(Communicator& comm, Model& model) {
  std::string bytes;
  for (Param* p : model.params()) {
    bytes.append(reinterpret_cast<const char*>(p->value.f32()),
                 static_cast<size_t>(p->value.numel()) * sizeof(float));
  }
  const std::vector<std::string> all = comm.gather(bytes, 0);
  for (size_t r = 1; r < all.size(); ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r;
}

TEST(DataParallel, TwoRanksTrainAsOneProcess) {
  TrainOptions alone = tiny_options();
  TrainResult ref = train(alone);
  TrainOptions dp = tiny_options();
  dp.comm = &world();
  TrainResult got = train(dp);
  ASSERT_TRUE(ref.finished && got.finished);

  // The same training up to float summation order. Each rank's half-batch runs the same ops on
  // half the rows, the halves' gradients are summed by MPI instead of inside one matmul, so
  // gradients differ by rounding (~1e-7 relative); AdamW divides by sqrt(v), which passes such
  // differences through at the size of the update, and 8 steps compound them a little. So:
  // every weight within 1e-4 of the single-process weight (measured here: 7e-7), while the
  // steps moved the weights by about 1e-2 (checked too, so the bound is not vacuous).
  std::unique_ptr<Model> init = make_model(ref.config, alone.seed);
  const std::vector<Param*> a = ref.model->params(), b = got.model->params(), z = init->params();
  ASSERT_EQ(a.size(), b.size());
  double moved = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->name, b[i]->name);
    for (int64_t k = 0; k < a[i]->value.numel(); ++k) {
      const float w = a[i]->value.f32()[k];
      moved = std::max(moved, static_cast<double>(std::fabs(w - z[i]->value.f32()[k])));
      worst = std::max(worst, static_cast<double>(std::fabs(w - b[i]->value.f32()[k])));
    }
  }
  if (world().rank() == 0) {
    std::printf("weights moved up to %.3g by training; 2 ranks vs one process: up to %.3g\n", moved,
                worst);
  }
  EXPECT_GT(moved, 5e-3);
  EXPECT_LT(worst, 1e-4) << "largest weight difference, 2 ranks vs one process";

  ASSERT_EQ(ref.history.size(), got.history.size());
  for (size_t e = 0; e < ref.history.size(); ++e) {
    EXPECT_NEAR(ref.history[e].train_loss, got.history[e].train_loss, 1e-4) << "epoch " << e;
    EXPECT_NEAR(ref.history[e].test_loss, got.history[e].test_loss, 1e-4) << "epoch " << e;
    EXPECT_NEAR(ref.history[e].test_acc, got.history[e].test_acc, 1.0 / 50 + 1e-9);
    EXPECT_EQ(got.history[e].ranks, 2);
    EXPECT_EQ(ref.history[e].ranks, 1);
  }
  expect_ranks_agree(world(), *got.model);
}

TEST(DataParallel, EvaluationCoversEverySampleOnce) {
  TrainOptions o = tiny_options();
  o.epochs = 1;
  TrainResult r = train(o);
  DatasetOptions d = o.data;
  d.train = false;
  d.limit = 50;
  auto test = make_dataset(d);
  const EvalResult alone = evaluate(*r.model, *test, 16);
  const EvalResult split = evaluate(*r.model, *test, 16, false, "eval", &world());
  EXPECT_EQ(split.count, 50);
  EXPECT_DOUBLE_EQ(split.accuracy, alone.accuracy);
  EXPECT_NEAR(split.loss, alone.loss, 1e-6);
}

// Rank 0 alone writes the run; a data-parallel run stopped after one epoch and resumed ends
// with exactly the weights of the uninterrupted data-parallel run (rank 0 reads the
// checkpoint, the others receive it).
TEST(DataParallel, RankZeroWritesAndResumeMatches) {
  Communicator& comm = world();
  std::string dir;
  if (comm.rank() == 0) {
    dir = (fs::temp_directory_path() / ("vitpe_test_dp_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir);
  }
  comm.broadcast(dir, 0);
  TrainOptions o = tiny_options();
  o.comm = &comm;
  o.out = dir + "/whole";
  TrainResult whole = train(o);

  o.out = dir + "/split";
  o.stop_after_epochs = 1;
  TrainResult first = train(o);
  EXPECT_FALSE(first.finished);
  o.resume = true;
  o.stop_after_epochs = 0;
  TrainResult second = train(o);
  ASSERT_TRUE(second.finished);
  const std::vector<Param*> a = whole.model->params(), b = second.model->params();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(a[i]->value.f32(), b[i]->value.f32(),
                             static_cast<size_t>(a[i]->value.numel()) * sizeof(float)))
        << a[i]->name;
  }
  comm.barrier();
  if (comm.rank() == 0) {
    EXPECT_TRUE(fs::exists(dir + "/split/last.safetensors"));
    EXPECT_TRUE(fs::exists(dir + "/whole/metrics.jsonl"));
    fs::remove_all(dir);
  }
  expect_ranks_agree(comm, *second.model);
}

TEST(DataParallel, BatchSmallerThanTheRanksIsRefused) {
  TrainOptions o = tiny_options();
  o.comm = &world();
  o.batch = 1;
  const std::string m = testing::message_of([&] { train(o); });
  EXPECT_NE(m.find("cannot be split over 2"), std::string::npos) << m;
}

}  // namespace
}  // namespace vitpe
