// `vitpe bench --model M --device cuda [--precision f32|bf16] [--batch 1,64,256] [--reps 20]
// [--json]`: whole-model inference on the GPU (vit/models/cuda_model.h). The images are uploaded
// once, before timing (device-resident input, as a pipeline that decodes on the GPU has); each
// timed forward ends with the logits copied back to the host, which waits for the GPU. Prints the
// median ms, img/s and TFLOP/s (the model's flops_per_image) per batch; in bf16 also the logits'
// error against the GPU's own f32 path on the same images.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/bench/bench_model_cuda.h"
#include "apps/bench/measure.h"
#include "apps/command.h"
#include "ops/random.h"
#include "vit/io/checkpoint.h"
#include "vit/models/cuda_model.h"
#ifdef VITPE_WITH_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

namespace vitpe::app {

namespace {

std::string device_line() {
#ifdef VITPE_WITH_CUDA
  return cuda::device_summary();
#else
  return "none (built without CUDA)";
#endif
}

std::string scientific(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

}  // namespace

void run_model_bench_cuda(const CudaModelBenchOptions& o) {
  DType dtype = DType::f32;
  try {
    dtype = cuda_dtype(parse_precision(o.precision), "bench --device cuda");
  } catch (const std::invalid_argument& e) {
    throw ExitError{2, e.what()};
  }
  LoadedModel loaded = load_model(o.model);
  Model& model = *loaded.model;
  const ModelConfig& c = model.config();
  CudaModel gpu(model, dtype);  // refuses unsupported models, a missing device or CUDA build
  std::unique_ptr<CudaModel> reference;  // bf16: the f32 path, for the logits' error
  if (dtype != DType::f32) reference = std::make_unique<CudaModel>(model, DType::f32);

  const double flops = model.flops_per_image();
  nlohmann::json out = {{"model", o.model},
                        {"kind", c.family},
                        {"encoding", c.encoding.str()},
                        {"parameters", model.num_params()},
                        {"device", "cuda"},
                        {"device_name", device_line()},
                        {"precision", o.precision},
                        {"flops_per_image", flops},
                        {"results", nlohmann::json::array()}};
  if (!o.json) {
    std::printf("model %s (%s, encoding %s), %.1fM parameters, %.2f GFLOP/image, on %s, %s\n",
                o.model.c_str(), c.family_label().c_str(), c.encoding.str().c_str(),
                model.num_params() / 1e6, flops / 1e9, device_line().c_str(), o.precision.c_str());
    std::printf("%6s %12s %12s %10s %10s %12s\n", "batch", "median ms", "min ms", "img/s",
                "TFLOP/s", "logit error");
  }
  Rng rng(0);
  for (int B : o.batches) {
    Tensor host = Tensor::empty({B, c.channels, c.img_rows, c.img_cols});
    rng.fill_normal(host, 1.0);
    const Tensor images = host.to(Device::cuda);
    nlohmann::json row = {{"batch", B}};
    double error = 0;
    if (reference) {
      const Tensor want = reference->forward(images).clone();
      error = max_rel_diff(want, gpu.forward(images));
      row["max_rel_logit_error"] = error;
    }
    for (int i = 0; i < 3; ++i) gpu.forward(images);  // warm-up: GEMM plans, arena
    const int reps = o.reps ? o.reps : 20;
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      gpu.forward(images);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    row["median_ms"] = med;
    row["min_ms"] = ms.front();
    row["max_ms"] = ms.back();
    row["img_per_s"] = B * 1000.0 / med;
    row["tflops_per_s"] = flops * B / (med * 1e9);
    out["results"].push_back(row);
    if (!o.json) {
      std::printf("%6d %12.2f %12.2f %10.1f %10.1f %12s\n", B, med, ms.front(), B * 1000.0 / med,
                  flops * B / (med * 1e9), reference ? scientific(error).c_str() : "-");
      std::fflush(stdout);
    }
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
}

}  // namespace vitpe::app
