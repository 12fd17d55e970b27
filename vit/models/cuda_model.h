// Whole-model inference on the CUDA device (ViT and Swin V1), built from a loaded CPU Model.
//
// The weights are uploaded once at construction (linear and patch-embedding weights in the
// activations' dtype, f32 or bf16; LayerNorm parameters, prefix tokens and position tables in
// f32). Activations live in one device arena per dtype, sized at the first forward of each
// (batch, image size) and reused: a steady-state forward allocates nothing. Attention is the
// fused kernel of ops/cuda/cuda_ops.h reading each block's encoding terms in place
// (AttentionEncoding::terms, taken from the CPU model once per input size); absolute encodings
// are the CPU model's table for the input grid, added on the device. Logits come back as f32.
//
// What the CPU model computes and this path does not (Swin V2's post-norm and cosine
// attention, SwiGLU MLPs, the MLP norm, conditional encodings such as PEG, head dims other than
// 32/64/128, attention encodings without kernel terms) is refused at construction, before the
// device is touched, naming the feature and the model. Swin inputs whose stage grids are not
// multiples of the window (or odd before a patch merging) are refused at forward: the CPU model
// pads them, this path does not.
//
// The CPU model must outlive this object. Its weights are read at construction: construct again
// after changing them. One forward at a time per instance.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "vit/models/model.h"

namespace vitpe {

// The GPU's dtype for an inference precision: f32 or bf16. The CPU-only precisions
// (bf16-emulated, int8) throw std::invalid_argument "WHO: precision P is a CPU mode; on the GPU
// use f32 or bf16".
inline DType cuda_dtype(Precision p, const std::string& who) {
  if (p == Precision::f32) return DType::f32;
  if (p == Precision::bf16) return DType::bf16;
  throw std::invalid_argument(who + ": precision " + precision_name(p) +
                              " is a CPU mode; on the GPU use f32 or bf16");
}

class CudaModel {
 public:
  // dtype: f32 (GEMMs in full f32, no TF32) or bf16 (tensor cores, f32 accumulation). Throws
  // std::invalid_argument for an unsupported model feature, std::runtime_error when no CUDA
  // device is present or vitpe was built without CUDA.
  explicit CudaModel(Model& model, DType dtype = DType::f32);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  // images: [B, C, H, W] f32 on the CPU or on the CUDA device (H, W multiples of the patch) ->
  // logits [B, classes], CPU f32, owned by this object and valid until the next forward.
  const Tensor& forward(const Tensor& images);

  const ModelConfig& config() const;
  DType dtype() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitpe
