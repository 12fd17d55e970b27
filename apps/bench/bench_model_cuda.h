// `vitpe bench --model M --device cuda`: the whole-model benchmark on the GPU
// (cmd_bench_model_cuda.cpp), called by `vitpe bench` (cmd_bench_model.cpp).
#pragma once

#include <string>
#include <vector>

namespace vitpe::app {

struct CudaModelBenchOptions {
  std::string model;  // preset name or checkpoint
  std::vector<int> batches;
  int reps = 0;                   // 0: 20 per batch
  std::string precision = "f32";  // f32 or bf16
  bool json = false;
};

// Prints ms, img/s and TFLOP/s per batch (JSON with `json`); throws std::runtime_error without a
// GPU or a CUDA build, ExitError for a precision the GPU path does not have.
void run_model_bench_cuda(const CudaModelBenchOptions& o);

}  // namespace vitpe::app
