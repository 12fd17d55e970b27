// Throughput streams: replicas share the model's weight storage and give its logits; a batch
// split over streams gives the whole batch's logits; several callers share the replicas; a slice
// that throws is reported after every slice has ended and leaves the replicas free; the other
// slices run on persistent workers.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ops/ops.h"
#include "tests/testing.h"
#include "vit/models/streams.h"

namespace vitpe {
namespace {

ModelConfig small(const std::string& name) {
  ModelConfig c = preset(name);
  if (c.is_swin()) return c;
  c.vit().depth = 2;
  return c;
}

Tensor images_for(const ModelConfig& c, int64_t batch, uint64_t seed) {
  return testing::random_tensor({batch, c.channels, c.img_rows, c.img_cols}, seed);
}

TEST(Streams, ReplicasShareTheWeightsAndGiveTheSameLogits) {
  for (const char* name : {"vit-fmnist", "swin-fmnist"}) {
    std::unique_ptr<Model> model = make_model(small(name), 3);
    std::unique_ptr<Model> replica = share_weights(*model);
    const std::vector<Param*> a = model->params(), b = replica->params();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(a[i]->value.shares_storage(b[i]->value)) << name << " " << a[i]->name;
    const Tensor x = images_for(model->config(), 2, 5);
    const Tensor want = model->forward(x).clone();
    EXPECT_EQ(testing::max_abs_diff(replica->forward(x), want), 0.0) << name;
  }
  // Its precision too: int8 weights converted for it, the same logits as the model's.
  std::unique_ptr<Model> model = make_model(small("vit-fmnist"), 3);
  model->set_precision(Precision::int8);
  std::unique_ptr<Model> replica = share_weights(*model);
  EXPECT_EQ(replica->precision(), Precision::int8);
  const Tensor x = images_for(model->config(), 2, 6);
  const Tensor want = model->forward(x).clone();
  EXPECT_EQ(testing::max_abs_diff(replica->forward(x), want), 0.0);
}

TEST(Streams, ASplitBatchGivesTheWholeBatchsLogits) {
  std::unique_ptr<Model> model = make_model(small("vit-fmnist"), 7);
  const ModelConfig& c = model->config();
  const Tensor x = images_for(c, 7, 9);
  const Tensor want = model->forward(x).clone();
  ModelStreams streams(*model, 3, 1);
  EXPECT_EQ(streams.streams(), 3);
  Tensor got = Tensor::zeros(want.shape());
  std::atomic<int> slices{0};
  std::vector<int> threads_seen(3, 0);
  streams.run(7, [&](Model& m, int64_t begin, int64_t end) {
    const Tensor& logits = m.forward(x.slice(begin, end));
    std::copy(logits.f32(), logits.f32() + logits.numel(), got.f32() + begin * c.classes);
    threads_seen[static_cast<size_t>(slices.fetch_add(1))] = num_threads();
  });
  EXPECT_EQ(slices.load(), 3);
  for (int t : threads_seen) EXPECT_EQ(t, 1);
  EXPECT_LT(testing::max_abs_diff(got, want), 1e-5);
  // A batch smaller than the streams takes one replica per image.
  slices = 0;
  streams.run(2, [&](Model&, int64_t begin, int64_t end) {
    EXPECT_EQ(end - begin, 1);
    ++slices;
  });
  EXPECT_EQ(slices.load(), 2);
}

TEST(Streams, SeveralCallersShareTheReplicas) {
  std::unique_ptr<Model> model = make_model(small("vit-fmnist"), 11);
  const ModelConfig& c = model->config();
  std::vector<Tensor> inputs, wants;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(images_for(c, 1, 20 + static_cast<uint64_t>(t)));
    wants.push_back(model->forward(inputs.back()).clone());
  }
  ModelStreams streams(*model, 2, 1);
  const int before = num_threads();
  std::vector<double> worst(4, 0);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        streams.run(1, [&](Model& m, int64_t, int64_t) {
          worst[t] = std::max(worst[t], testing::max_abs_diff(m.forward(inputs[t]), wants[t]));
        });
      }
    });
  }
  for (std::thread& th : callers) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_LT(worst[t], 1e-5) << "caller " << t;
  EXPECT_EQ(num_threads(), before);
}

TEST(Streams, ASliceThatThrowsIsReportedAndTheReplicasStayUsable) {
  std::unique_ptr<Model> model = make_model(small("vit-fmnist"), 1);
  ModelStreams streams(*model, 2, 1);
  std::atomic<int> ended{0};
  EXPECT_THROW(streams.run(4,
                           [&](Model&, int64_t begin, int64_t) {
                             ++ended;
                             if (begin > 0) throw std::runtime_error("slice failed");
                           }),
               std::runtime_error);
  EXPECT_EQ(ended.load(), 2);
  std::atomic<int> runs{0};
  streams.run(2, [&](Model&, int64_t, int64_t) { ++runs; });
  EXPECT_EQ(runs.load(), 2);
  EXPECT_THROW(ModelStreams(*model, 0, 1), std::invalid_argument);
  EXPECT_THROW(ModelStreams(*model, 2, 0), std::invalid_argument);
}

// The slices off the calling thread run on the replicas' own workers, the same threads from one
// call to the next (the per-thread state of a forward is built once), and a ModelStreams that
// goes out of scope stops them.
TEST(Streams, TheOtherSlicesRunOnPersistentWorkers) {
  std::unique_ptr<Model> model = make_model(small("vit-fmnist"), 2);
  for (int round = 0; round < 2; ++round) {
    ModelStreams streams(*model, 3, 1);
    std::vector<std::thread::id> first(3), again(3);
    for (std::vector<std::thread::id>* seen : {&first, &again}) {
      streams.run(3, [&](Model&, int64_t begin, int64_t) {
        (*seen)[static_cast<size_t>(begin)] = std::this_thread::get_id();
      });
    }
    EXPECT_EQ(first[0], std::this_thread::get_id());
    EXPECT_NE(first[1], first[0]);
    EXPECT_NE(first[2], first[0]);
    EXPECT_NE(first[1], first[2]);
    EXPECT_EQ(again, first);
  }
}

}  // namespace
}  // namespace vitpe
