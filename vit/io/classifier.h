// Image classification in one call: a model with the preprocessing it carries (its file, timm's
// config.json beside it, or its preset; vit/io/preprocess.h), softmax and top-k.
//
//   vitpe::Classifier classifier("models/vit-fmnist.safetensors");  // or a timm file, a preset
//   for (const vitpe::Prediction& p : classifier.classify(cv::imread("shoe.png"), 3))
//     std::printf("%s %.1f%%\n", p.label.c_str(), 100 * p.probability);
//
// Device: ClassifierOptions::device = Device::cuda runs the whole forward on the GPU (ViT and
// Swin V1; vit/models/cuda_model.h says what it refuses), precision f32 or bf16; the
// preprocessing and top-k stay on the CPU. Without a GPU, or in a build without CUDA, the
// constructor throws std::runtime_error saying so.
//
// Threads: every method may be called from several threads on one instance. With one stream (the
// default) calls on one instance run one at a time, because the model keeps its activations in
// per-instance buffers (so a steady-state call allocates nothing); each call uses the instance's
// thread count for its matmuls and loops, or fewer when the machine is busy and fewer are
// faster (adaptive_threads below). With ClassifierOptions::streams = N (throughput streams,
// vit/models/streams.h) the instance holds N replicas of the model sharing its weights, each
// with threads / N compute threads: a batch is split over the replicas free at the time and
// their slices run at once, and up to N calls from several threads run at the same time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "vitpe/ops/ops.h"
#include "vitpe/vit/io/checkpoint.h"
#include "vitpe/vit/io/preprocess.h"

namespace vitpe {

class AdaptiveThreads;
class CudaModel;
class ModelStreams;

struct Prediction {
  int64_t index = 0;
  std::string label;  // the model's class name, or "class N" when it has none
  float probability = 0;
};

// The k most probable classes of one row of logits (softmax in double; ties: the lower index
// first). `labels` may be empty. Throws std::runtime_error when a logit is NaN or infinite.
std::vector<Prediction> top_k(const float* logits, int64_t classes, int k,
                              const std::vector<std::string>& labels);

struct ClassifierOptions {
  LoadOptions load;  // preset, labels file, preprocessing overrides, ... (vit/io/checkpoint.h)
  Precision precision = Precision::f32;
  int threads = 0;  // compute threads of this instance's calls (0: the process's setting)
  // Each CPU call times itself, and a batch shape whose calls are faster on fewer threads (a
  // busy machine: another process on a core makes every parallel region wait for the thread
  // sharing it) runs on fewer, probing the full count again now and then. Results may differ
  // in the last bits between thread counts. false: always `threads`. Default: true unless the
  // environment sets VITPE_ADAPTIVE_THREADS=0.
  bool adaptive_threads = adaptive_threads_default();
  Device device = Device::cpu;  // where the model runs (Device::cuda: f32 or bf16 precision)
  // Throughput streams (CPU): N >= 1 concurrent forwards of threads / N threads each (at least
  // one), as OpenVINO's THROUGHPUT hint runs them; more images per second at batch > 1 or from
  // several calling threads, and a longer batch-1 latency than one stream's. With N > 1 the
  // thread counts are fixed (adaptive_threads does not apply); the replicas share the weights
  // and their packed or bf16 copies (int8's quantised weights are copied per replica).
  int streams = 1;
  // f32 on the CPU: pack the linear weights once into the layout the CPU's matmul reads
  // (Model::set_precision), so calls do not repack them. With AVX-512 that is a second copy of
  // them (ViT-S/16 +82 MiB, ViT-B/16 +327 MiB) for 1.03-1.08x faster calls; on an AVX2 CPU the
  // matmul reads the plain weights and nothing is packed. false: one copy, repacked per call.
  bool pack_weights = true;
};

class Classifier {
 public:
  // Loads a checkpoint (ours, timm, torchvision) or builds a preset; throws what load_model
  // throws.
  explicit Classifier(const std::string& checkpoint_or_preset,
                      const ClassifierOptions& options = {});
  ~Classifier();

  // An image as OpenCV holds it (cv::imread: BGR, BGRA or gray; 8 or 16 bits; any size) -> its
  // k most probable classes. Throws std::invalid_argument for an empty image or one of another
  // depth or channel count, std::runtime_error for non-finite logits.
  std::vector<Prediction> classify(const cv::Mat& image, int k = 5);
  // Several images in one forward pass (preprocessed in parallel); results in input order.
  std::vector<std::vector<Prediction>> classify(const std::vector<cv::Mat>& images, int k = 5);
  // Input already preprocessed, read in place from the caller's memory (no copy): `batch`
  // images of [channels, rows, cols] floats laid out as preprocess() produces them. The memory
  // must stay valid and unchanged during the call. A NaN or infinite value is refused
  // (std::invalid_argument naming the image and where), so non-finite logits mean the model.
  std::vector<std::vector<Prediction>> classify_preprocessed(const float* images, int64_t batch,
                                                             int k = 5);
  // The image's features: the pooled vector the head reads (timm's forward_head(x,
  // pre_logits=True): the class token, the mean of the patch tokens or SigLIP's attention pool,
  // after the final norm), model.embed_dim() floats; with `normalize`, scaled to unit L2 norm
  // (for cosine similarity). The embedding of an image encoder without a head (DINOv2, SigLIP)
  // or of any classifier. CPU only (Device::cuda: std::runtime_error). Throws as classify().
  std::vector<float> embed(const cv::Mat& image, bool normalize = false);
  // Several images in one forward pass; results in input order.
  std::vector<std::vector<float>> embed(const std::vector<cv::Mat>& images,
                                        bool normalize = false);

  const ModelConfig& config() const { return loaded_.model->config(); }
  // The transform classify() applies (rows x cols, crop, interpolation, mean, std).
  const Preprocess& preprocess() const { return preprocess_; }
  // How the config was obtained (vit/io/checkpoint.h LoadedModel::notes).
  const std::vector<std::string>& notes() const { return loaded_.notes; }
  int threads() const { return threads_; }
  int streams() const;
  Device device() const { return gpu_ ? Device::cuda : Device::cpu; }

 private:
  std::vector<std::vector<Prediction>> run(const Tensor& images, int k);
  // The images preprocessed into one batch; errors name `what` and the image.
  Tensor batch_of(const std::vector<cv::Mat>& images, const char* what) const;

  LoadedModel loaded_;
  std::unique_ptr<CudaModel> gpu_;  // Device::cuda: the GPU copy of loaded_.model
  Preprocess preprocess_;
  int threads_ = 0;
  std::unique_ptr<AdaptiveThreads> adaptive_;  // the thread count per batch shape (CPU)
  std::unique_ptr<ModelStreams> streams_;      // ClassifierOptions::streams > 1 (CPU)
  std::mutex mutex_;  // one forward at a time: the model's buffers are this instance's
};

}  // namespace vitpe
