// Classifier: load + preprocess + forward + softmax/top-k (vit/io/classifier.h).
#include "vit/io/classifier.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "ops/adaptive_threads.h"
#include "ops/ops.h"
#include "vit/models/cuda_model.h"
#include "vit/models/streams.h"

namespace vitpe {

std::vector<Prediction> top_k(const float* logits, int64_t classes, int k,
                              const std::vector<std::string>& labels) {
  if (classes <= 0 || k <= 0) {
    throw std::invalid_argument("top_k: expected classes > 0 and k > 0, found " +
                                std::to_string(classes) + " and " + std::to_string(k));
  }
  if (!std::all_of(logits, logits + classes, [](float v) { return std::isfinite(v); })) {
    throw std::runtime_error(
        "the model's logits are not finite (NaN or Inf weights, or a bad config such as a "
        "negative eps)");
  }
  const float most = *std::max_element(logits, logits + classes);
  std::vector<double> p(static_cast<size_t>(classes));
  double sum = 0;
  for (int64_t i = 0; i < classes; ++i)
    sum += p[i] = std::exp(static_cast<double>(logits[i] - most));
  std::vector<int64_t> order(static_cast<size_t>(classes));
  std::iota(order.begin(), order.end(), 0);
  const int64_t n = std::min<int64_t>(k, classes);
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::vector<Prediction> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = order[i];
    out.push_back(
        {c, static_cast<size_t>(c) < labels.size() ? labels[c] : "class " + std::to_string(c),
         static_cast<float>(p[c] / sum)});
  }
  return out;
}

Classifier::Classifier(const std::string& checkpoint_or_preset, const ClassifierOptions& options)
    : loaded_(load_model(checkpoint_or_preset, options.load)),
      preprocess_(Preprocess::from(loaded_.model->config())),
      threads_(options.threads),
      adaptive_(std::make_unique<AdaptiveThreads>(options.adaptive_threads)) {
  if (options.threads < 0 || options.threads > 1024) {
    throw std::invalid_argument(
        "Classifier: threads must be 0 (the process's setting) to 1024, "
        "found " +
        std::to_string(options.threads));
  }
  if (options.streams < 1 || options.streams > 64) {
    throw std::invalid_argument("Classifier: streams must be 1 to 64 concurrent forwards, found " +
                                std::to_string(options.streams));
  }
  if (options.device == Device::cuda) {
    if (options.streams != 1) {
      throw std::invalid_argument("Classifier: streams are CPU forwards; Device::cuda takes 1, "
                                  "found " + std::to_string(options.streams));
    }
    gpu_ = std::make_unique<CudaModel>(*loaded_.model, cuda_dtype(options.precision, "Classifier"));
    return;
  }
  loaded_.model->set_precision(options.precision, options.pack_weights);
  if (options.streams > 1) {
    const int total = threads_ > 0 ? threads_ : num_threads();
    streams_ = std::make_unique<ModelStreams>(*loaded_.model, options.streams,
                                              std::max(1, total / options.streams));
  }
}

int Classifier::streams() const { return streams_ ? streams_->streams() : 1; }

Classifier::~Classifier() = default;

namespace {

// Sets the calling thread's compute threads for one call and restores them (OpenMP's thread
// count is per calling thread, so other threads' settings are untouched).
// One adaptive-threads workload per input shape (batch, rows, cols): their times are not
// comparable.
uint64_t workload_key(const Tensor& images) {
  return (static_cast<uint64_t>(images.size(0)) << 32) ^
         (static_cast<uint64_t>(images.size(2)) << 16) ^ static_cast<uint64_t>(images.size(3));
}

class ThreadScope {
 public:
  explicit ThreadScope(int threads) : before_(num_threads()) {
    if (threads > 0) set_num_threads(threads);
  }
  ~ThreadScope() { set_num_threads(before_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int before_;
};

}  // namespace

std::vector<std::vector<Prediction>> Classifier::run(const Tensor& images, int k) {
  const ModelConfig& c = config();
  if (c.classes == 0) {
    throw std::invalid_argument(
        "Classifier::classify: the model has no classifier head (classes 0: an image encoder, "
        "such as DINOv2's or SigLIP's): use embed() for its features");
  }
  if (streams_) {
    // Each slice's rows of logits become its rows of predictions, on the slice's own thread.
    std::vector<std::vector<Prediction>> out(static_cast<size_t>(images.size(0)));
    streams_->run(images.size(0), [&](Model& m, int64_t begin, int64_t end) {
      const Tensor& logits = m.forward(images.slice(begin, end));
      for (int64_t i = begin; i < end; ++i) {
        try {
          out[static_cast<size_t>(i)] =
              top_k(logits.f32() + (i - begin) * c.classes, c.classes, k, c.labels);
        } catch (const std::runtime_error& e) {
          throw std::runtime_error("image " + std::to_string(i) + " of the batch: " + e.what());
        }
      }
    });
    return out;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ThreadScope scope(threads_);
  const uint64_t key = workload_key(images);
  const Tensor* logits_ptr = nullptr;
  if (gpu_) {
    logits_ptr = &gpu_->forward(images);
  } else {
    AdaptiveThreads::Call call(*adaptive_, key);
    logits_ptr = &loaded_.model->forward(images);
  }
  const Tensor& logits = *logits_ptr;
  std::vector<std::vector<Prediction>> out;
  for (int64_t i = 0; i < images.size(0); ++i) {
    try {
      out.push_back(top_k(logits.f32() + i * c.classes, c.classes, k, c.labels));
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("image " + std::to_string(i) + " of the batch: " + e.what());
    }
  }
  return out;
}

std::vector<Prediction> Classifier::classify(const cv::Mat& image, int k) {
  return classify(std::vector<cv::Mat>{image}, k).front();
}

std::vector<std::vector<Prediction>> Classifier::classify(const std::vector<cv::Mat>& images,
                                                          int k) {
  if (images.empty()) return {};
  return run(batch_of(images, "Classifier::classify"), k);
}

std::vector<float> Classifier::embed(const cv::Mat& image, bool normalize) {
  return embed(std::vector<cv::Mat>{image}, normalize).front();
}

namespace {
// One image's features from row `row` of pooled [B, D], checked finite and, with `normalize`,
// scaled to unit L2 norm; `image` names it in errors.
std::vector<float> feature_row(const Tensor& pooled, int64_t row, int64_t image, bool normalize) {
  const int64_t D = pooled.size(1);
  const float* p = pooled.f32() + row * D;
  std::vector<float> v(p, p + D);
  if (!std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); })) {
    throw std::runtime_error("Classifier::embed: image " + std::to_string(image) +
                             " of the batch: the features are not finite (the weights?)");
  }
  if (normalize) {
    double sq = 0;
    for (float x : v) sq += static_cast<double>(x) * x;
    const double norm = std::sqrt(sq);
    if (norm > 0) {
      for (float& x : v) x = static_cast<float>(x / norm);
    }
  }
  return v;
}
}  // namespace

std::vector<std::vector<float>> Classifier::embed(const std::vector<cv::Mat>& images,
                                                  bool normalize) {
  if (images.empty()) return {};
  if (gpu_) {
    throw std::runtime_error(
        "Classifier::embed: runs on the CPU (the GPU path computes logits only): construct the "
        "Classifier with Device::cpu");
  }
  const Tensor batch = batch_of(images, "Classifier::embed");
  std::vector<std::vector<float>> out(static_cast<size_t>(batch.size(0)));
  if (streams_) {
    streams_->run(batch.size(0), [&](Model& m, int64_t begin, int64_t end) {
      const Model::Features f = m.forward_features(batch.slice(begin, end));
      for (int64_t i = begin; i < end; ++i)
        out[static_cast<size_t>(i)] = feature_row(*f.pooled, i - begin, i, normalize);
    });
    return out;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ThreadScope scope(threads_);
  AdaptiveThreads::Call call(*adaptive_, workload_key(batch));
  const Model::Features f = loaded_.model->forward_features(batch);
  for (int64_t i = 0; i < batch.size(0); ++i)
    out[static_cast<size_t>(i)] = feature_row(*f.pooled, i, i, normalize);
  return out;
}

Tensor Classifier::batch_of(const std::vector<cv::Mat>& images, const char* what) const {
  const Preprocess& p = preprocess_;
  const int64_t B = static_cast<int64_t>(images.size());
  Tensor batch = Tensor::empty({B, p.channels, p.rows, p.cols});
  const size_t per_image = static_cast<size_t>(p.channels) * p.rows * p.cols;
  std::vector<std::string> errors(images.size());
#pragma omp parallel for schedule(dynamic) if (B > 1)
  for (int64_t i = 0; i < B; ++i) {
    try {
      const std::string name = "image " + std::to_string(i);
      if (images[i].empty()) throw std::invalid_argument(name + ": empty cv::Mat");
      preprocess_into(to_uint8_channels(images[i], p.channels, name), p,
                      batch.f32() + i * per_image);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  }
  for (const std::string& e : errors) {
    if (!e.empty()) throw std::invalid_argument(std::string(what) + ": " + e);
  }
  return batch;
}

std::vector<std::vector<Prediction>> Classifier::classify_preprocessed(const float* images,
                                                                       int64_t batch, int k) {
  const Preprocess& p = preprocess_;
  if (images == nullptr || batch <= 0) {
    throw std::invalid_argument(
        "Classifier::classify_preprocessed: expected a buffer of " + std::to_string(batch) +
        " > 0 images, found " +
        (images == nullptr ? "a null pointer" : "a batch of " + std::to_string(batch)));
  }
  // A non-finite input makes every logit non-finite; said here, it is not blamed on the weights.
  const int64_t per_image = int64_t{p.channels} * p.rows * p.cols;
  for (int64_t i = 0; i < batch * per_image; ++i) {
    if (!std::isfinite(images[i])) {
      const int64_t at = i % per_image;
      throw std::invalid_argument(
          "Classifier::classify_preprocessed: image " + std::to_string(i / per_image) +
          " of the batch holds a non-finite input value (" + std::to_string(images[i]) +
          " at channel " + std::to_string(at / (p.rows * p.cols)) + ", row " +
          std::to_string(at / p.cols % p.rows) + ", column " + std::to_string(at % p.cols) +
          "): expected finite preprocessed pixels");
    }
  }
  return run(Tensor::wrap(images, {batch, p.channels, p.rows, p.cols}), k);
}

}  // namespace vitpe
