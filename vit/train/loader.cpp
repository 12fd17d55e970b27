// The background batch producer (see loader.h for the determinism contract).
#include "vit/train/loader.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "ops/random.h"
#include "ops/resample.h"

namespace vitpe {

Loader::Loader(const Dataset& data, LoaderOptions options) : data_(data), opt_(options) {
  if (opt_.batch <= 0) throw std::invalid_argument("Loader: batch must be positive");
  if (opt_.prefetch < 1) opt_.prefetch = 1;
  for (int64_t size : opt_.sizes) {
    if (size < 1) {
      throw std::invalid_argument("Loader: multi-resolution sizes must be positive, got " +
                                  std::to_string(size));
    }
  }
  if (opt_.shards < 1 || opt_.shard < 0 || opt_.shard >= opt_.shards) {
    throw std::invalid_argument("Loader: shard " + std::to_string(opt_.shard) + " of " +
                                std::to_string(opt_.shards) + " (expected 0 <= shard < shards)");
  }
}

Loader::~Loader() { stop(); }

int64_t Loader::batches_per_epoch() const {
  int64_t n = data_.size();
  return opt_.drop_last ? n / opt_.batch : (n + opt_.batch - 1) / opt_.batch;
}

std::vector<int64_t> Loader::order(int64_t epoch) const {
  std::vector<int64_t> idx(data_.size());
  for (int64_t i = 0; i < data_.size(); ++i) idx[i] = i;
  if (opt_.shuffle) {
    Rng rng(mix_seed(opt_.seed, 0x6f72646572ull, static_cast<uint64_t>(epoch)));
    for (int64_t i = data_.size() - 1; i > 0; --i) {
      std::swap(idx[i], idx[rng.below(static_cast<uint64_t>(i) + 1)]);
    }
  }
  return idx;
}

int32_t Loader::make_sample(int64_t epoch, int64_t j, int64_t index, float* image) const {
  if (!opt_.augment) return data_.get(index, image);
  const uint64_t seed =
      mix_seed(opt_.seed, 0x6175676dull, static_cast<uint64_t>(epoch), static_cast<uint64_t>(j));
  if (data_.augments_itself()) return data_.get_augmented(index, seed, opt_.flip, image);
  const int64_t C = data_.channels(), H = data_.rows(), W = data_.cols();
  thread_local std::vector<float> src;
  src.resize(static_cast<size_t>(C * H * W));
  int32_t label = data_.get(index, src.data());
  Rng rng(seed);
  if (opt_.zoom) {
    const CropBox box = sample_crop_box(static_cast<int>(W), static_cast<int>(H), *opt_.zoom, rng);
    const int32_t flipped = data_.flipped_label(label);
    const bool flip = rng.below(2) == 1 && opt_.flip && flipped >= 0;
    resized_crop_planes(src.data(), C, H, W, box, flip, image);
    return flip ? flipped : label;
  }
  const int64_t p = data_.crop_padding();
  // Crop offset in [-p, p] of the padded image; draws happen even when unused so the stream
  // does not depend on the policy of the dataset.
  const int64_t oy = static_cast<int64_t>(rng.below(2 * p + 1)) - p;
  const int64_t ox = static_cast<int64_t>(rng.below(2 * p + 1)) - p;
  const bool want_flip = rng.below(2) == 1;
  const int32_t flipped = data_.flipped_label(label);
  const bool flip = opt_.flip && want_flip && flipped >= 0;
  for (int64_t c = 0; c < C; ++c) {
    const float pad = data_.pad_value(c);
    const float* s = src.data() + c * H * W;
    float* d = image + c * H * W;
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + oy;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t xx = flip ? W - 1 - x : x;  // flip after the crop
        const int64_t sx = xx + ox;
        d[y * W + x] = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? s[sy * W + sx] : pad;
      }
    }
  }
  return flip ? flipped : label;
}

int64_t Loader::batch_size_px(int64_t epoch, int64_t b) const {
  if (opt_.sizes.empty()) return 0;
  Rng rng(mix_seed(opt_.seed, 0x6d726573ull, static_cast<uint64_t>(epoch), static_cast<uint64_t>(b)));
  return opt_.sizes[rng.below(opt_.sizes.size())];
}

void Loader::produce(int64_t epoch) {
  try {
    const std::vector<int64_t> idx = order(epoch);
    const int64_t n = data_.size();
    const int64_t C = data_.channels(), H = data_.rows(), W = data_.cols();
    const int64_t batches = batches_per_epoch();
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t first = b * opt_.batch, len = std::min(n, first + opt_.batch) - first;
      const int64_t begin = first + len * opt_.shard / opt_.shards;
      const int64_t end = first + len * (opt_.shard + 1) / opt_.shards;
      if (begin == end) continue;
      const int64_t side = batch_size_px(epoch, b);
      Batch batch;
      batch.rows = side > 0 ? side : H;
      batch.cols = side > 0 ? side : W;
      batch.labels.resize(static_cast<size_t>(end - begin));
      // The samples at the dataset's size; with another side, all of them resized in one pass
      // (their channels are planes of one resample: the taps are made once per batch).
      const bool resize = batch.rows != H || batch.cols != W;
      std::vector<float> made(static_cast<size_t>((end - begin) * C * H * W));
      for (int64_t j = begin; j < end; ++j)
        batch.labels[j - begin] = make_sample(epoch, j, idx[j], made.data() + (j - begin) * C * H * W);
      if (!resize) {
        batch.images = std::move(made);
      } else {
        const Tensor planes = Tensor::wrap(made.data(), {(end - begin) * C, H, W});
        const Tensor r = resample(planes, batch.rows, batch.cols, Filter::bilinear, true);
        batch.images.assign(r.f32(), r.f32() + r.numel());
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return cancel_ || static_cast<int>(queue_.size()) < opt_.prefetch; });
      if (cancel_) return;
      queue_.push_back(std::move(batch));
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  done_ = true;
  cv_.notify_all();
}

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  queue_.clear();
  done_ = false;
  cancel_ = false;
  error_ = nullptr;
}

void Loader::start_epoch(int64_t epoch) {
  stop();
  thread_ = std::thread([this, epoch] { produce(epoch); });
}

bool Loader::next(Tensor& images, std::vector<int32_t>& labels) {
  Batch batch;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || done_ || error_; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
    if (queue_.empty()) return false;
    batch = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
  }
  const auto B = static_cast<int64_t>(batch.labels.size());
  const Shape shape{B, data_.channels(), batch.rows, batch.cols};
  if (!images.defined() || images.shape() != shape) images = Tensor::empty(shape);
  std::memcpy(images.f32(), batch.images.data(), batch.images.size() * sizeof(float));
  labels = std::move(batch.labels);
  return true;
}

}  // namespace vitpe
